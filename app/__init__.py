"""The application: the ``attnbayes`` command, the HTML report, user data and runs.

- ``cli``: ``attnbayes report | deconvolve | filter | regress | regimes | calibrate``:
  configures JAX, runs one command, maps failures to exit statuses;
- ``parser``: the command's options, defaults and help texts (free of JAX; the methods come
  from the registry ``attnbayes.inference.methods``);
- ``deconvolve``, ``filter`` and ``filter_fit``: ``attnbayes deconvolve`` and ``attnbayes
  filter`` on a user's data (``filter --fit`` learns the parameters first);
- ``regress``: ``attnbayes regress``: Nadaraya-Watson kernel regression of one column of a user's
  CSV on another, the bandwidth by leave-one-out CV, with a pointwise band;
- ``regimes``: ``attnbayes regimes``: a Markov-switching regression, MS-AR or MS-VAR of
  columns of a user's CSV (statsmodels' table, regime probabilities, forecasts);
  ``regimes_page``: what it writes and says (the tables, the warnings, the model text, the
  figure, the summary, the page);
- ``calibrate``: calibration studies over a fixed prior (tables, DataTrees, the ECDF-PIT figure);
- ``runs``: what deconvolve, filter and regress share: option checks, the output folder's name,
  its manifest and atomic publishing;
- ``report``: the comparison report (scenarios, runners, figures, HTML);
- ``user_data``: reading users' CSV and JSON files;
- ``binomial``: ``deconvolve --binomial``'s variance-stabilising transform of counts (Brown 2008);
- ``outputs`` and ``pages``: atomic, guarded writing of output folders, and the HTML pieces;
- ``parallel``: the report's independent parts on worker processes, one per core, each with
  max(1, C // W) host devices;
- ``cache``: JAX's persistent compilation cache for the command, the report and the notebooks;
- ``devices``: the host devices a run gets (one per usable core unless ``XLA_FLAGS`` sets a
  count; the report's workers share the cores) and the launch of several processes
  (``--coordinator``, ``--process-id``, ``--num-processes``; ``jax.distributed``).

The only code in attnbayes that plots with pyplot, sets a matplotlib backend or writes files;
nothing imports it.
"""
