"""``nnhal batch MODEL INPUT OUTPUT``: a model over a data set on Ray Data, written as parquet parts.

The input (a folder of images, one .npz or a folder of them, one .parquet or a
folder of them) is listed on the driver and cut into *parts* of
``rows_per_part`` rows. Each part is one row of a Ray Dataset; a pool of actors
(``nnhal.batch.runner.PartRunner``, each holding a ``nnhal.ray.Predictor``)
loads its rows, runs them and writes ``OUTPUT/part-NNNNN.parquet`` under a
temporary name, then renames it: a part file that exists is complete. A rerun
skips complete parts, so a stopped job resumes and nothing written is lost.

An output part has one row per input row: ``key`` (the file name, or
``name.npz[i]``, or the ``--key`` column), ``error`` (null, or why the row did
not run) and one column per model output (null where error is set), as nested
fixed-size lists of the output's row shape.

Modules: spec (the records), inputs (listing, parts, reading rows), runner
(the actor), job (run_job on Ray Data, resume), cli (the command).
"""
from nnhal.batch.job import run_job
from nnhal.batch.runner import PartRunner
from nnhal.batch.spec import JobReport, JobSpec, Part

__all__ = ["JobReport", "JobSpec", "Part", "PartRunner", "run_job"]
