"""The application: the ``attnbayes`` command, the HTML report, user data and runs.

- ``cli``: ``attnbayes report | deconvolve | filter | calibrate``;
- ``calibrate``: calibration studies over a fixed prior (tables, DataTrees, the ECDF-PIT figure);
- ``report``: the comparison report (scenarios, runners, figures, HTML);
- ``user_data`` and ``user_runs``: reading users' CSV and JSON files, and running a method on
  them;
- ``outputs`` and ``pages``: atomic, guarded writing of output folders, and the HTML pieces;
- ``parallel``: the report's independent parts on worker processes, one per core;
- ``cache``: JAX's persistent compilation cache for the command, the report and the notebooks.

The only code in attnbayes that plots with pyplot, sets a matplotlib backend or writes files;
nothing imports it.
"""
