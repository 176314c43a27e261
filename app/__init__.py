"""The application: the ``attnbayes`` command, the HTML report, user data and runs.

- ``cli``: ``attnbayes report | deconvolve | filter``;
- ``report``: the comparison report (scenarios, runners, figures, HTML);
- ``user_data`` and ``user_runs``: reading users' CSV and JSON files, and running a method on
  them;
- ``outputs`` and ``pages``: atomic, guarded writing of output folders, and the HTML pieces.

The only code in attnbayes that plots with pyplot, sets a matplotlib backend or writes files;
nothing imports it.
"""
