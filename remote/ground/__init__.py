"""The ground floor: the facts every room of remote/ shares, each with one owner.

- `errors`       the one error tree (GpuprovError and its kinds) and `Where`, a file and line.
- `exitcodes`    the exit statuses every command returns.
- `paths`        where the recipes, locks, the validation package and the user's files are.
- `envvars`      numbers that can be set through the environment.
- `forks`        how many hosts a run works on at once by default.
- `fileio`       the one atomic file write.
- `runid`        run ids: made here, recognised in what a host sends back.
- `runfolder`    the run folder's file names and what a run without results is.
- `resultsfile`  reading a host's results.json within caps.
- `rows`         a table whose rows' modules are imported when first used (kinds, schedulers).

Nothing here imports anything of remote/ outside this package.
"""
