"""``python -m catlib``: the commands train, eval, audit and sample (:mod:`.commands`), their
flags generated from the config fields with every flag's help in one table
(:mod:`.flags`), and sampling text from a trained model (:mod:`.sample`)."""
from .commands import main  # noqa: F401
