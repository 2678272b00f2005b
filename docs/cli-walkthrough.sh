# The README's CLI walk-through, run as it stands against a running instance by tests/local/test_cli.py.
tickwork preview '30 2 * * *' --tz Europe/Berlin --count 5        # next fires, DST marked
tickwork jobs create --name 'db backup' --schedule '*/10 * * * *' --http http://127.0.0.1:8081/backup
JOB=$(tickwork -o json jobs list --all | python3 -c 'import json, sys; print([j["id"] for j in json.load(sys.stdin)["items"] if j["name"] == "db backup"][0])')
tickwork jobs get "$JOB"
tickwork jobs run "$JOB"                                          # run now, besides the schedule
tickwork runs list "$JOB"                                         # history, newest first
tickwork jobs pause "$JOB" --note "disk swap tonight"            # a pause or a delete says why
tickwork jobs run "$JOB" --even-if-paused                         # a paused job runs only when you insist
tickwork jobs resume "$JOB"
tickwork jobs backfill "$JOB" --from 1h --rate 5                  # every fire of the last hour, 5 a second
tickwork runs failed --since 1h                                   # what broke, across your jobs
tickwork events --job "$JOB"                                      # what its rules noticed, newest first
tickwork jobs apply -f docs/examples/jobs.yaml --dry-run          # the diff, nothing written
tickwork jobs apply -f docs/examples/jobs.yaml --yes              # create what is new
tickwork jobs apply -f docs/examples/jobs.yaml --yes              # again: nothing to change
tickwork jobs revisions "$JOB"                                    # every write: who, what changed, why
tickwork jobs diff "$JOB" 1 2                                     # what one write changed, field by field
tickwork audit                                                    # every write of your jobs, newest first
tickwork calendars put holidays --tz Europe/Berlin --date 2027-12-25=Christmas   # an exclusion calendar
tickwork jobs update "$JOB" --calendar holidays                   # its fires on Christmas: recorded excluded
tickwork jobs preview "$JOB" --after 2027-12-24T22:50:00Z --count 3  # the excluded fires marked
tickwork jobs update "$JOB" --group backups                       # one group per job (default: default)
tickwork groups                                                   # your groups, their jobs by state
tickwork jobs pause --group backups --note "storage move" --until +2h   # every job of it; back in 2 h
tickwork jobs resume --group backups --note "moved early"         # one request, with a progress bar
tickwork jobs delete "$JOB" --yes --note "replaced by the new backup job"
