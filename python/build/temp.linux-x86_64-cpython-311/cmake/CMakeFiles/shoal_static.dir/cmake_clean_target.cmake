file(REMOVE_RECURSE
  "libshoal.a"
)
