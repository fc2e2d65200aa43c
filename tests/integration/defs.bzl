"""ringd_backend_test: one Python integration test, run once per io backend."""

BACKENDS = ["uring", "epoll"]

def ringd_backend_test(name, src, size = "medium", backends = BACKENDS, tags = []):
    for backend in backends:
        native.sh_test(
            name = "%s_%s" % (name, backend),
            size = size,
            srcs = ["run_py_test.sh"],
            args = ["$(location //server:ringd)", backend, "$(location %s)" % src],
            data = [src, "ringd_harness.py", "//server:ringd"],
            tags = tags + ["integration"],
        )
