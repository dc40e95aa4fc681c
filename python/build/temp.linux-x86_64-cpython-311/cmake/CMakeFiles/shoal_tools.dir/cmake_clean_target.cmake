file(REMOVE_RECURSE
  "libshoal_tools.a"
)
