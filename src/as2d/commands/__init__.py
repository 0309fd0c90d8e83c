"""The bodies of the `as2d` commands that decode audio or handle models (`cli.py` parses the
command line and calls one; `eval/commands.py` has the evaluation ones), a module a job:

    common      exit codes, `UsageError`, one-line failures, a one-off command's Transcriber
    arguments   the Options of the parsed arguments, checked before any model loads
    transcribe  transcribe and ask: files, folders, manifests, standard input; output, progress
    prepare     draft and prepare: work done ahead for later requests
    serve       serve (HTTP) and listen (the microphone): the commands that run until stopped
    models      models and export: the models on this machine, and a copy of one for a device

Each takes the parsed arguments and returns an exit code (see `cli.py`); a problem with the
command line itself is raised as `UsageError`. Only what every command needs is imported at
the top of these modules (no torch, no transformers): each command imports the library
modules it uses when it runs.
"""
