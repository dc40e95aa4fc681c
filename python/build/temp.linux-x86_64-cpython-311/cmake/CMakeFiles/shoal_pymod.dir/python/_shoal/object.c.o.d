CMakeFiles/shoal_pymod.dir/python/_shoal/object.c.o: \
 /work/main/python/_shoal/object.c /usr/include/stdc-predef.h \
 /work/main/python/_shoal/module.h /usr/include/python3.11/Python.h \
 /usr/include/python3.11/patchlevel.h /usr/include/python3.11/pyconfig.h \
 /usr/include/x86_64-linux-gnu/python3.11/pyconfig.h \
 /usr/include/python3.11/pymacconfig.h /usr/include/stdlib.h \
 /usr/include/x86_64-linux-gnu/bits/libc-header-start.h \
 /usr/include/features.h /usr/include/features-time64.h \
 /usr/include/x86_64-linux-gnu/bits/wordsize.h \
 /usr/include/x86_64-linux-gnu/bits/timesize.h \
 /usr/include/x86_64-linux-gnu/sys/cdefs.h \
 /usr/include/x86_64-linux-gnu/bits/long-double.h \
 /usr/include/x86_64-linux-gnu/gnu/stubs.h \
 /usr/include/x86_64-linux-gnu/gnu/stubs-64.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h \
 /usr/include/x86_64-linux-gnu/bits/waitflags.h \
 /usr/include/x86_64-linux-gnu/bits/waitstatus.h \
 /usr/include/x86_64-linux-gnu/bits/floatn.h \
 /usr/include/x86_64-linux-gnu/bits/floatn-common.h \
 /usr/include/x86_64-linux-gnu/bits/types/locale_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__locale_t.h \
 /usr/include/x86_64-linux-gnu/sys/types.h \
 /usr/include/x86_64-linux-gnu/bits/types.h \
 /usr/include/x86_64-linux-gnu/bits/typesizes.h \
 /usr/include/x86_64-linux-gnu/bits/time64.h \
 /usr/include/x86_64-linux-gnu/bits/types/clock_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/clockid_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/time_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/timer_t.h \
 /usr/include/x86_64-linux-gnu/bits/stdint-intn.h /usr/include/endian.h \
 /usr/include/x86_64-linux-gnu/bits/endian.h \
 /usr/include/x86_64-linux-gnu/bits/endianness.h \
 /usr/include/x86_64-linux-gnu/bits/byteswap.h \
 /usr/include/x86_64-linux-gnu/bits/uintn-identity.h \
 /usr/include/x86_64-linux-gnu/sys/select.h \
 /usr/include/x86_64-linux-gnu/bits/select.h \
 /usr/include/x86_64-linux-gnu/bits/types/sigset_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__sigset_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_timeval.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_timespec.h \
 /usr/include/x86_64-linux-gnu/bits/pthreadtypes.h \
 /usr/include/x86_64-linux-gnu/bits/thread-shared-types.h \
 /usr/include/x86_64-linux-gnu/bits/pthreadtypes-arch.h \
 /usr/include/x86_64-linux-gnu/bits/atomic_wide_counter.h \
 /usr/include/x86_64-linux-gnu/bits/struct_mutex.h \
 /usr/include/x86_64-linux-gnu/bits/struct_rwlock.h /usr/include/alloca.h \
 /usr/include/x86_64-linux-gnu/bits/stdlib-bsearch.h \
 /usr/include/x86_64-linux-gnu/bits/stdlib-float.h /usr/include/stdio.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdarg.h \
 /usr/include/x86_64-linux-gnu/bits/types/__fpos_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__mbstate_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__fpos64_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/cookie_io_functions_t.h \
 /usr/include/x86_64-linux-gnu/bits/stdio_lim.h \
 /usr/include/x86_64-linux-gnu/bits/stdio.h /usr/include/errno.h \
 /usr/include/x86_64-linux-gnu/bits/errno.h /usr/include/linux/errno.h \
 /usr/include/x86_64-linux-gnu/asm/errno.h \
 /usr/include/asm-generic/errno.h /usr/include/asm-generic/errno-base.h \
 /usr/include/x86_64-linux-gnu/bits/types/error_t.h /usr/include/string.h \
 /usr/include/strings.h /usr/include/unistd.h \
 /usr/include/x86_64-linux-gnu/bits/posix_opt.h \
 /usr/include/x86_64-linux-gnu/bits/environments.h \
 /usr/include/x86_64-linux-gnu/bits/confname.h \
 /usr/include/x86_64-linux-gnu/bits/getopt_posix.h \
 /usr/include/x86_64-linux-gnu/bits/getopt_core.h \
 /usr/include/x86_64-linux-gnu/bits/unistd_ext.h \
 /usr/include/linux/close_range.h /usr/include/assert.h \
 /usr/include/wchar.h /usr/include/x86_64-linux-gnu/bits/wchar.h \
 /usr/include/x86_64-linux-gnu/bits/types/wint_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/mbstate_t.h \
 /usr/include/python3.11/pyport.h /usr/include/inttypes.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdint.h /usr/include/stdint.h \
 /usr/include/x86_64-linux-gnu/bits/stdint-uintn.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/limits.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/syslimits.h \
 /usr/include/limits.h /usr/include/x86_64-linux-gnu/bits/posix1_lim.h \
 /usr/include/x86_64-linux-gnu/bits/local_lim.h \
 /usr/include/linux/limits.h \
 /usr/include/x86_64-linux-gnu/bits/pthread_stack_min-dynamic.h \
 /usr/include/x86_64-linux-gnu/bits/posix2_lim.h \
 /usr/include/x86_64-linux-gnu/bits/xopen_lim.h \
 /usr/include/x86_64-linux-gnu/bits/uio_lim.h /usr/include/math.h \
 /usr/include/x86_64-linux-gnu/bits/math-vector.h \
 /usr/include/x86_64-linux-gnu/bits/libm-simd-decl-stubs.h \
 /usr/include/x86_64-linux-gnu/bits/flt-eval-method.h \
 /usr/include/x86_64-linux-gnu/bits/fp-logb.h \
 /usr/include/x86_64-linux-gnu/bits/fp-fast.h \
 /usr/include/x86_64-linux-gnu/bits/mathcalls-helper-functions.h \
 /usr/include/x86_64-linux-gnu/bits/mathcalls.h \
 /usr/include/x86_64-linux-gnu/bits/mathcalls-narrow.h \
 /usr/include/x86_64-linux-gnu/bits/iscanonical.h \
 /usr/include/x86_64-linux-gnu/sys/time.h /usr/include/time.h \
 /usr/include/x86_64-linux-gnu/bits/time.h \
 /usr/include/x86_64-linux-gnu/bits/timex.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_tm.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_itimerspec.h \
 /usr/include/x86_64-linux-gnu/sys/stat.h \
 /usr/include/x86_64-linux-gnu/bits/stat.h \
 /usr/include/x86_64-linux-gnu/bits/struct_stat.h \
 /usr/include/x86_64-linux-gnu/bits/statx.h /usr/include/linux/stat.h \
 /usr/include/linux/types.h /usr/include/x86_64-linux-gnu/asm/types.h \
 /usr/include/asm-generic/types.h /usr/include/asm-generic/int-ll64.h \
 /usr/include/x86_64-linux-gnu/asm/bitsperlong.h \
 /usr/include/asm-generic/bitsperlong.h /usr/include/linux/posix_types.h \
 /usr/include/linux/stddef.h \
 /usr/include/x86_64-linux-gnu/asm/posix_types.h \
 /usr/include/x86_64-linux-gnu/asm/posix_types_64.h \
 /usr/include/asm-generic/posix_types.h \
 /usr/include/x86_64-linux-gnu/bits/statx-generic.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_statx_timestamp.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_statx.h \
 /usr/include/python3.11/exports.h /usr/include/python3.11/pymacro.h \
 /usr/include/python3.11/pymath.h /usr/include/python3.11/pymem.h \
 /usr/include/python3.11/cpython/pymem.h \
 /usr/include/python3.11/pytypedefs.h /usr/include/python3.11/pybuffer.h \
 /usr/include/python3.11/object.h \
 /usr/include/python3.11/cpython/object.h \
 /usr/include/python3.11/objimpl.h \
 /usr/include/python3.11/cpython/objimpl.h \
 /usr/include/python3.11/typeslots.h /usr/include/python3.11/pyhash.h \
 /usr/include/python3.11/cpython/pydebug.h \
 /usr/include/python3.11/bytearrayobject.h \
 /usr/include/python3.11/cpython/bytearrayobject.h \
 /usr/include/python3.11/bytesobject.h \
 /usr/include/python3.11/cpython/bytesobject.h \
 /usr/include/python3.11/unicodeobject.h /usr/include/ctype.h \
 /usr/include/python3.11/cpython/unicodeobject.h \
 /usr/include/python3.11/longobject.h \
 /usr/include/python3.11/cpython/longobject.h \
 /usr/include/python3.11/cpython/longintrepr.h \
 /usr/include/python3.11/boolobject.h \
 /usr/include/python3.11/floatobject.h \
 /usr/include/python3.11/cpython/floatobject.h \
 /usr/include/python3.11/complexobject.h \
 /usr/include/python3.11/cpython/complexobject.h \
 /usr/include/python3.11/rangeobject.h \
 /usr/include/python3.11/memoryobject.h \
 /usr/include/python3.11/tupleobject.h \
 /usr/include/python3.11/cpython/tupleobject.h \
 /usr/include/python3.11/listobject.h \
 /usr/include/python3.11/cpython/listobject.h \
 /usr/include/python3.11/dictobject.h \
 /usr/include/python3.11/cpython/dictobject.h \
 /usr/include/python3.11/cpython/odictobject.h \
 /usr/include/python3.11/enumobject.h /usr/include/python3.11/setobject.h \
 /usr/include/python3.11/cpython/setobject.h \
 /usr/include/python3.11/methodobject.h \
 /usr/include/python3.11/cpython/methodobject.h \
 /usr/include/python3.11/moduleobject.h \
 /usr/include/python3.11/cpython/funcobject.h \
 /usr/include/python3.11/cpython/classobject.h \
 /usr/include/python3.11/fileobject.h \
 /usr/include/python3.11/cpython/fileobject.h \
 /usr/include/python3.11/pycapsule.h \
 /usr/include/python3.11/cpython/code.h /usr/include/python3.11/pyframe.h \
 /usr/include/python3.11/cpython/pyframe.h \
 /usr/include/python3.11/traceback.h \
 /usr/include/python3.11/cpython/traceback.h \
 /usr/include/python3.11/sliceobject.h \
 /usr/include/python3.11/cpython/cellobject.h \
 /usr/include/python3.11/iterobject.h \
 /usr/include/python3.11/cpython/initconfig.h \
 /usr/include/python3.11/pystate.h \
 /usr/include/python3.11/cpython/pystate.h \
 /usr/include/python3.11/cpython/genobject.h \
 /usr/include/python3.11/descrobject.h \
 /usr/include/python3.11/cpython/descrobject.h \
 /usr/include/python3.11/genericaliasobject.h \
 /usr/include/python3.11/warnings.h \
 /usr/include/python3.11/cpython/warnings.h \
 /usr/include/python3.11/weakrefobject.h \
 /usr/include/python3.11/cpython/weakrefobject.h \
 /usr/include/python3.11/structseq.h \
 /usr/include/python3.11/cpython/picklebufobject.h \
 /usr/include/python3.11/cpython/pytime.h \
 /usr/include/python3.11/codecs.h /usr/include/python3.11/pyerrors.h \
 /usr/include/python3.11/cpython/pyerrors.h \
 /usr/include/python3.11/pythread.h \
 /usr/include/python3.11/cpython/pythread.h /usr/include/pthread.h \
 /usr/include/sched.h /usr/include/x86_64-linux-gnu/bits/sched.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_sched_param.h \
 /usr/include/x86_64-linux-gnu/bits/cpu-set.h \
 /usr/include/x86_64-linux-gnu/bits/setjmp.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct___jmp_buf_tag.h \
 /usr/include/python3.11/cpython/context.h \
 /usr/include/python3.11/modsupport.h \
 /usr/include/python3.11/cpython/modsupport.h \
 /usr/include/python3.11/compile.h \
 /usr/include/python3.11/cpython/compile.h \
 /usr/include/python3.11/pythonrun.h \
 /usr/include/python3.11/cpython/pythonrun.h \
 /usr/include/python3.11/pylifecycle.h \
 /usr/include/python3.11/cpython/pylifecycle.h \
 /usr/include/python3.11/ceval.h /usr/include/python3.11/cpython/ceval.h \
 /usr/include/python3.11/sysmodule.h \
 /usr/include/python3.11/cpython/sysmodule.h \
 /usr/include/python3.11/osmodule.h /usr/include/python3.11/intrcheck.h \
 /usr/include/python3.11/import.h \
 /usr/include/python3.11/cpython/import.h \
 /usr/include/python3.11/abstract.h \
 /usr/include/python3.11/cpython/abstract.h \
 /usr/include/python3.11/bltinmodule.h \
 /usr/include/python3.11/cpython/pyctype.h \
 /usr/include/python3.11/pystrtod.h /usr/include/python3.11/pystrcmp.h \
 /usr/include/python3.11/fileutils.h \
 /usr/include/python3.11/cpython/fileutils.h \
 /usr/include/python3.11/cpython/pyfpe.h \
 /usr/include/python3.11/tracemalloc.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdbool.h \
 /work/main/include/shoal/shoal.h /work/main/include/shoal/base.h \
 /work/main/include/shoal/ext.h /work/main/include/shoal/rpc.h \
 /work/main/include/shoal/store.h /work/main/include/shoal/fiber.h \
 /work/main/include/shoal/tasks.h /usr/include/dlpack/dlpack.h
