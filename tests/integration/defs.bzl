"""ringd_backend_test: one Python integration test, run once per io backend."""

BACKENDS = ["bypass", "uring", "epoll"]

def ringd_backend_test(name, src, size = "medium", backends = BACKENDS, tags = [], extra = None, env = {}, data = []):
    """`extra`: a target passed as the 4th argument (a wrapper command, or a .so to preload).
    `env`: environment variables for the test; `data`: more files it reads."""
    for backend in backends:
        native.sh_test(
            name = "%s_%s" % (name, backend),
            size = size,
            srcs = ["run_py_test.sh"],
            args = ["$(location //server:ringd)", backend, "$(location %s)" % src] +
                   (["$(location %s)" % extra] if extra else []),
            data = [src, "ringd_harness.py", "//server:ringd"] + ([extra] if extra else []) + data,
            env = env,
            tags = tags + ["integration"],
        )

def ringd_wrapped_test(name, src, backend, wrapper, size = "medium", tags = []):
    """One Python integration test with ringd started under `wrapper` (a cc_binary)."""
    native.sh_test(
        name = name,
        size = size,
        srcs = ["run_py_test.sh"],
        args = ["$(location //server:ringd)", backend, "$(location %s)" % src, "$(location %s)" % wrapper],
        data = [src, "ringd_harness.py", "//server:ringd", wrapper],
        tags = tags + ["integration"],
    )

def ringd_flags_test(name, src, backend, flags, size = "large", data = []):
    """One Python integration test on one backend, with ringd started with `flags` too (the
    harness adds RINGD_FLAGS to every ringd it starts). `data`: more files it reads."""
    native.sh_test(
        name = name,
        size = size,
        srcs = ["run_py_test.sh"],
        args = ["$(location //server:ringd)", backend, "$(location %s)" % src],
        data = [src, "ringd_harness.py", "//server:ringd"] + data,
        env = {"RINGD_FLAGS": flags},
        tags = ["integration"],
    )
