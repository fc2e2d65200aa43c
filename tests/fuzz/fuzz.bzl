"""ringd_fuzz_target: one LLVMFuzzerTestOneInput source, two ways to run it.

- `<name>_replay`, a cc_test linking the source with replay_main.cc and running every file of the
  corpus once: it runs in every build, so `tools/test` replays the corpus.
- `<name>`, the libFuzzer binary, tagged manual: build it with --config=fuzz (clang, libFuzzer).
"""

def ringd_fuzz_target(name, srcs, deps, corpus):
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        deps = deps,
        alwayslink = True,
        testonly = True,
    )
    native.cc_test(
        name = name + "_replay",
        size = "small",
        srcs = ["replay_main.cc"],
        deps = [":" + name + "_lib"],
        data = native.glob([corpus + "/**"]),
        args = [native.package_name() + "/" + corpus],
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_lib"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        testonly = True,
    )
