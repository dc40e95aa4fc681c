/* The CPython thread-state fields a tasklet switch saves and restores, one
 * block per CPython minor version: the only file that knows PyThreadState's
 * private layout. All tasklets of a thread share its one PyThreadState
 * (switching thread states per tasklet deadlocks PyGILState_Ensure); what
 * is per tasklet is swapped at each switch, greenlet's list for 3.11
 * (TPythonState.cpp), without its stack copying: a tasklet's C frames and
 * _PyCFrame stay on its own stack while it is parked.
 *
 * The exception stack needs its pointer alone: every tasklet roots its
 * chain in a _PyErr_StackItem of its own, so tstate->exc_state (the
 * bottom item) is only ever the main context's. The contextvars context
 * moves with its reference (no DECREF here: a switch runs no Python code).
 * trash_delete_later is not swapped (greenlet does not either): a tasklet
 * switches from a deallocator only if a __del__ blocks. */
#ifndef SHOAL_PY_TASKLET_PYSTATE_H
#define SHOAL_PY_TASKLET_PYSTATE_H

#include "module.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000

typedef struct sh_pystate {
	_PyCFrame *cframe;
	int recursion_depth;
	_PyStackChunk *datastack_chunk;
	PyObject **datastack_top, **datastack_limit;
	_PyErr_StackItem *exc_info;
	PyObject *context;
	int trash_delete_nesting;
} sh_pystate;

/* Chunks of the frame data stack a tasklet starts on: CPython's own size
 * (DATA_STACK_CHUNK_SIZE in pystate.c). */
#define SH_PY_CHUNK_BYTES (16 * 1024)

/* Saves the running context's fields; *tracing gets use_tracing, which
 * the next context to run takes over (it mirrors whether the thread has a
 * trace or profile function, which all tasklets share). */
static inline void sh_pystate_save(PyThreadState *ts, sh_pystate *st, uint8_t *tracing)
{
	st->cframe = ts->cframe;
	*tracing = ts->cframe->use_tracing;
	st->recursion_depth = ts->recursion_limit - ts->recursion_remaining;
	st->datastack_chunk = ts->datastack_chunk;
	st->datastack_top = ts->datastack_top;
	st->datastack_limit = ts->datastack_limit;
	st->exc_info = ts->exc_info;
	st->context = ts->context;
	st->trash_delete_nesting = ts->trash_delete_nesting;
}

static inline void sh_pystate_restore(PyThreadState *ts, const sh_pystate *st, uint8_t tracing)
{
	ts->cframe = st->cframe;
	ts->cframe->use_tracing = tracing;
	/* the limit may have changed meanwhile (sys.setrecursionlimit) */
	ts->recursion_remaining = ts->recursion_limit - st->recursion_depth;
	ts->datastack_chunk = st->datastack_chunk;
	ts->datastack_top = st->datastack_top;
	ts->datastack_limit = st->datastack_limit;
	ts->exc_info = st->exc_info;
	ts->context = st->context;
	ts->context_ver++; /* contextvars caches the last lookup by version */
	ts->trash_delete_nesting = st->trash_delete_nesting;
}

/* A new tasklet's fields: its root C frame and exception item (on its
 * own stack), recursion depth 0, a data stack of one chunk (the root
 * chunk, whose first slot CPython skips so a pop never frees it, as
 * push_chunk does), and its context (a reference it owns). */
static inline void sh_pystate_start(PyThreadState *ts, _PyCFrame *cf, _PyErr_StackItem *exc,
				    void *chunk, PyObject *context, uint8_t tracing)
{
	cf->use_tracing = tracing;
	cf->current_frame = NULL;
	cf->previous = NULL;
	ts->cframe = cf;
	ts->recursion_remaining = ts->recursion_limit;
	_PyStackChunk *c = chunk;
	c->previous = NULL;
	c->size = SH_PY_CHUNK_BYTES;
	c->top = 0;
	ts->datastack_chunk = c;
	ts->datastack_top = &c->data[1];
	ts->datastack_limit = (PyObject **)((char *)c + SH_PY_CHUNK_BYTES);
	exc->exc_value = NULL;
	exc->previous_item = NULL;
	ts->exc_info = exc;
	ts->context = context;
	ts->context_ver++;
	ts->trash_delete_nesting = 0;
}

/* What a finished tasklet leaves until the next context restores its own:
 * nothing that points into its stack or its chunk, which are reused. */
static inline void sh_pystate_park(PyThreadState *ts, _PyCFrame *park_cf, uint8_t tracing)
{
	park_cf->use_tracing = tracing;
	park_cf->current_frame = NULL;
	park_cf->previous = NULL;
	ts->cframe = park_cf;
	ts->datastack_chunk = NULL;
	ts->datastack_top = NULL;
	ts->datastack_limit = NULL;
	ts->exc_info = &ts->exc_state;
	ts->context = NULL;
}

#else
#error "shoal's tasklets know CPython 3.11's thread state only: this is another version; add its fields to python/_shoal/tasklet_pystate.h (see greenlet's TPythonState.cpp for what changed)"
#endif

#endif
