file(REMOVE_RECURSE
  "libshoal_bench.a"
)
