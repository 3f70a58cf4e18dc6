"""What every layer uses: devices (:mod:`.devices`), where a result came from
(:mod:`.provenance`), tensor files read safely (:mod:`.tensorfile`) and numbers and tables
formatted (:mod:`.formatting`). Imports nothing of catlib."""
