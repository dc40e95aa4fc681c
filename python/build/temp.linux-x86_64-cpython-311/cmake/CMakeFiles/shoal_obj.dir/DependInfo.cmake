
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  "ASM"
  )
# The set of files for implicit dependencies of each language:
set(CMAKE_DEPENDS_CHECK_ASM
  "/work/main/src/fiber/ctx_x86_64.S" "/work/main/python/build/temp.linux-x86_64-cpython-311/cmake/CMakeFiles/shoal_obj.dir/src/fiber/ctx_x86_64.S.o"
  )
set(CMAKE_ASM_COMPILER_ID "GNU")

# Preprocessor definitions for this target.
set(CMAKE_TARGET_DEFINITIONS_ASM
  "SHOAL_BINDIR=\"/usr/local/bin\""
  "SHOAL_BINDIR_FROM_LIBDIR=\"../bin\""
  "_GNU_SOURCE"
  )

# The include file search paths:
set(CMAKE_ASM_TARGET_INCLUDE_PATH
  "/work/main/include"
  "/work/main/src"
  "/usr/include"
  "/usr/include/cjson"
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/base/alloc.c" "CMakeFiles/shoal_obj.dir/src/base/alloc.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/alloc.c.o.d"
  "/work/main/src/base/bump.c" "CMakeFiles/shoal_obj.dir/src/base/bump.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/bump.c.o.d"
  "/work/main/src/base/error.c" "CMakeFiles/shoal_obj.dir/src/base/error.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/error.c.o.d"
  "/work/main/src/base/futex.c" "CMakeFiles/shoal_obj.dir/src/base/futex.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/futex.c.o.d"
  "/work/main/src/base/log.c" "CMakeFiles/shoal_obj.dir/src/base/log.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/log.c.o.d"
  "/work/main/src/base/map.c" "CMakeFiles/shoal_obj.dir/src/base/map.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/map.c.o.d"
  "/work/main/src/base/paths.c" "CMakeFiles/shoal_obj.dir/src/base/paths.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/paths.c.o.d"
  "/work/main/src/base/ptrstack.c" "CMakeFiles/shoal_obj.dir/src/base/ptrstack.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/ptrstack.c.o.d"
  "/work/main/src/base/time.c" "CMakeFiles/shoal_obj.dir/src/base/time.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/base/time.c.o.d"
  "/work/main/src/fiber/chan.c" "CMakeFiles/shoal_obj.dir/src/fiber/chan.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/fiber/chan.c.o.d"
  "/work/main/src/fiber/sched.c" "CMakeFiles/shoal_obj.dir/src/fiber/sched.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/fiber/sched.c.o.d"
  "/work/main/src/fiber/signal.c" "CMakeFiles/shoal_obj.dir/src/fiber/signal.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/fiber/signal.c.o.d"
  "/work/main/src/fiber/stack.c" "CMakeFiles/shoal_obj.dir/src/fiber/stack.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/fiber/stack.c.o.d"
  "/work/main/src/net/channel.c" "CMakeFiles/shoal_obj.dir/src/net/channel.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/net/channel.c.o.d"
  "/work/main/src/net/sha256.c" "CMakeFiles/shoal_obj.dir/src/net/sha256.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/net/sha256.c.o.d"
  "/work/main/src/net/tcp.c" "CMakeFiles/shoal_obj.dir/src/net/tcp.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/net/tcp.c.o.d"
  "/work/main/src/ring/link.c" "CMakeFiles/shoal_obj.dir/src/ring/link.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/ring/link.c.o.d"
  "/work/main/src/ring/msg.c" "CMakeFiles/shoal_obj.dir/src/ring/msg.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/ring/msg.c.o.d"
  "/work/main/src/ring/ring.c" "CMakeFiles/shoal_obj.dir/src/ring/ring.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/ring/ring.c.o.d"
  "/work/main/src/rpc/ext_host.c" "CMakeFiles/shoal_obj.dir/src/rpc/ext_host.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/rpc/ext_host.c.o.d"
  "/work/main/src/rpc/ext_lib.c" "CMakeFiles/shoal_obj.dir/src/rpc/ext_lib.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/rpc/ext_lib.c.o.d"
  "/work/main/src/rpc/ext_runner.c" "CMakeFiles/shoal_obj.dir/src/rpc/ext_runner.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/rpc/ext_runner.c.o.d"
  "/work/main/src/rpc/value.c" "CMakeFiles/shoal_obj.dir/src/rpc/value.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/rpc/value.c.o.d"
  "/work/main/src/shm/shm.c" "CMakeFiles/shoal_obj.dir/src/shm/shm.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/shm/shm.c.o.d"
  "/work/main/src/store/builder.c" "CMakeFiles/shoal_obj.dir/src/store/builder.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/builder.c.o.d"
  "/work/main/src/store/client.c" "CMakeFiles/shoal_obj.dir/src/store/client.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/client.c.o.d"
  "/work/main/src/store/dtype.c" "CMakeFiles/shoal_obj.dir/src/store/dtype.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/dtype.c.o.d"
  "/work/main/src/store/node.c" "CMakeFiles/shoal_obj.dir/src/store/node.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/node.c.o.d"
  "/work/main/src/store/safetensors.c" "CMakeFiles/shoal_obj.dir/src/store/safetensors.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/safetensors.c.o.d"
  "/work/main/src/store/server.c" "CMakeFiles/shoal_obj.dir/src/store/server.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/server.c.o.d"
  "/work/main/src/store/st_io.c" "CMakeFiles/shoal_obj.dir/src/store/st_io.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/st_io.c.o.d"
  "/work/main/src/store/state.c" "CMakeFiles/shoal_obj.dir/src/store/state.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/store/state.c.o.d"
  "/work/main/src/tasks/controller.c" "CMakeFiles/shoal_obj.dir/src/tasks/controller.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/tasks/controller.c.o.d"
  "/work/main/src/tasks/engine.c" "CMakeFiles/shoal_obj.dir/src/tasks/engine.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/tasks/engine.c.o.d"
  "/work/main/src/tasks/farm.c" "CMakeFiles/shoal_obj.dir/src/tasks/farm.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/tasks/farm.c.o.d"
  "/work/main/src/tasks/proto.c" "CMakeFiles/shoal_obj.dir/src/tasks/proto.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/tasks/proto.c.o.d"
  "/work/main/src/wire/wire.c" "CMakeFiles/shoal_obj.dir/src/wire/wire.c.o" "gcc" "CMakeFiles/shoal_obj.dir/src/wire/wire.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
