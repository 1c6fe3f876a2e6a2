"""A result made once per test session and shared by every process of it (pytest-xdist's workers under
`make test`): the book executed per target, each committed run built, the clean clone's test ids."""

#: set by tests/conftest.py (pytest_configure): this process is a pytest-xdist worker. Not read from the
#: environment, which a pytest started by a test (tests/test_readers_commands.py) inherits from its worker.
IN_WORKER = False


def session_root(tmp_path_factory):
    """The temporary folder of the whole test session: pytest's base folder, or, where pytest-xdist runs the
    suite in several worker processes (`make test`), the folder above the workers' own (shared by them)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if IN_WORKER else base


def once_per_session(tmp_path_factory, name, make):
    """make(folder) once per test session, its result shared by every process of the session: the first to
    ask makes it in <session root>/<name> under a lock while the others wait, then all read the pickled
    result. A make that raises leaves nothing, so the next one to ask tries again (and fails the same way)."""
    import fcntl
    import pickle
    import shutil

    root = session_root(tmp_path_factory)
    folder, done = root / name, root / f"{name}.result.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return pickle.loads(done.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        result = make(folder)
        done.write_bytes(pickle.dumps(result))
        return result
