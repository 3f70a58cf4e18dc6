"""The book's notebooks run in kernels that start without warnings a reader cannot act on
(ipykernel's "Kernel is running over TCP without encryption")."""
import nbformat

from catlib.book.execution import execute, kernel_config


def test_a_notebook_runs_in_a_quiet_kernel(tmp_path, capfd):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print(x + 1)")]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    source = tmp_path / "src"
    source.mkdir()
    nbformat.write(nb, str(source / "tiny.ipynb"))
    execute("tiny", {"x": 2}, source, tmp_path / "out")
    out, err = capfd.readouterr()
    assert "without encryption" not in out + err, err
    executed = nbformat.read(str(tmp_path / "out" / "tiny.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"] == "3\n"
    assert kernel_config()["KernelManager"]      # the manager's switch, or IPC
