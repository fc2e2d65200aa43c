"""mimalloc everywhere but under a sanitizer, whose own allocator replaces it (//:sanitizer_*)."""

def mimalloc_deps():
    """//third_party:mimalloc, or nothing under a sanitizer."""
    return select({
        "//:sanitizer_address": [],
        "//:sanitizer_thread": [],
        "//:sanitizer_undefined": [],
        "//conditions:default": ["//third_party:mimalloc"],
    })

def no_mimalloc_defines():
    """RINGD_NO_MIMALLOC where mimalloc_deps() links nothing: code that calls mi_* checks it."""
    return select({
        "//:sanitizer_address": ["RINGD_NO_MIMALLOC"],
        "//:sanitizer_thread": ["RINGD_NO_MIMALLOC"],
        "//:sanitizer_undefined": ["RINGD_NO_MIMALLOC"],
        "//conditions:default": [],
    })
