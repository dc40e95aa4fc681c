/* shoal._shoal: declarations shared by the C extension module's files
 * (module.c: init, exceptions; client.c: Client, Store; object.c: Object,
 * Tensor, Blob; value.c: Python values as call values; ext.c and child.c:
 * isolated extensions, the host's side and the extension's, and in child.c
 * the entries of the Python engine and a cluster's supervisor; farm.c:
 * Controller, Farm; tasklet.c, channel.c, tasklet_io.c: tasklets, channels,
 * select, fd waits and to_thread on shoal's fibers, tasklet_calls.c: the
 * calls above from tasklets; cluster.c: clusters started through a
 * launcher; remote.c: Remote, a client of another host's store over TCP).
 * The module is the thin C layer the pure-Python package `shoal` builds
 * on: every store, extension and task call goes through here, with the GIL
 * released while it blocks (kept, in a thread with tasklets, while only
 * the calling tasklet waits). */
#ifndef SHOAL_PY_MODULE_H
#define SHOAL_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include <shoal/shoal.h>
#include <shoal/ext.h>
#include <shoal/store.h>

/* A connection. Its mutex makes it one thread's at a time, as the C
 * client requires; it is taken with the GIL released so that a thread
 * blocked on the store never holds up the interpreter. */
typedef struct {
	PyObject_HEAD shoal_client *c; /* NULL once disconnected */
	pthread_mutex_t mu;	       /* guards c, closed, nobjs and every call on c */
	pid_t pid;		       /* the process that connected */
	unsigned long gen;	       /* fork generation at the connect */
	bool closed;		       /* close() was called: no new calls */
	size_t nobjs;		       /* Objects still holding a shoal_object */
	PyObject *socket;	       /* str */
	/* Objects dropped by a tasklet while another tasklet of the thread was
	 * inside a call on c: released by that call as it ends (GIL held). */
	shoal_object **dropped;
	size_t ndropped, dropped_cap;
} ShClient;

/* A got object: one reference on the store's object until released; or
 * an object got from a remote store (Remote.get): its bytes in this
 * process's memory, client NULL. */
typedef struct {
	PyObject_HEAD ShClient *client; /* strong, or NULL */
	shoal_object *o;		/* NULL once let go */
	shoal_id id;
	uint64_t nbytes;
	size_t views; /* live Tensors and Blobs of it */
	bool release_asked;
} ShObject;

extern PyTypeObject ShClient_Type, ShStore_Type, ShObject_Type, ShTensor_Type, ShBlob_Type;

extern PyObject *ShError, *ShNotFound, *ShNameTaken, *ShStoreFull, *ShTimeout, *ShInvalidInput,
	*ShClosed;

/* Sets the exception class that matches rc, with msg (or shoal_strerror(rc)
 * when msg is empty). Returns NULL, for `return sh_py_raise(...)`. */
PyObject *sh_py_raise(int rc, const char *msg);
/* shoal_strerror, or strerror for an errno shoal has no name for. */
const char *sh_py_strerror(int rc);
PyObject *sh_py_raisef(PyObject *cls, int rc, const char *fmt, ...);

/* Locks mu with the GIL released only when it must wait (a thread holding mu
 * may need the GIL to let go of it). Call with the GIL held. */
void sh_py_lock(pthread_mutex_t *mu);
/* c was connected by another process (before a fork). */
bool sh_py_client_foreign(const ShClient *c);
/* NULL and Closed set when c may not be used from here (closed, or
 * connected by another process before a fork). */
int sh_py_client_check(ShClient *c);
/* Lets go of o's store reference (takes the client's mutex). GIL held. */
void sh_py_object_drop(ShObject *o);
/* A new Object holding nothing yet (o->o NULL), of client (NULL: a remote
 * store's), tracked by the GC: made before a get, so that once the store's
 * reference is taken nothing may fail. */
ShObject *sh_py_object_new(ShClient *client);
/* Object.cow(): a copy-on-write view of o (shoal_object_cow), an Object too. */
PyObject *sh_py_object_cow(ShObject *o);

/* A tensor's memory as a Py_buffer (owner: what keeps it), with the struct
 * format fmt (empty: none for this dtype) and dims: shape, then strides in
 * bytes. Shared by the store's Tensor and a call's Value. */
int sh_py_tensor_buffer(Py_buffer *v, PyObject *owner, const void *data, size_t nbytes,
			shoal_dtype dt, int ndim, Py_ssize_t *dims, char *fmt, bool readonly,
			int flags);
/* The struct module's format of a dtype, or 0 (bf16, 8-bit floats). */
char sh_py_struct_format(shoal_dtype dt);
/* A DLPack capsule's destructor: the deleter runs unless a consumer took it. */
void sh_py_capsule_gone(PyObject *cap);
/* What a zero-byte buffer points at: consumers want a non-NULL pointer. */
extern char sh_py_empty_buf[1];

/* Object.tensor()/tensors()/blob() build these. */
PyObject *sh_py_tensor_new(ShObject *o, const shoal_node *n);
PyObject *sh_py_blob_new(ShObject *o, const void *data, size_t size);

/* ---- arguments, shared by Client (client.c) and Remote (remote.c) ---- */

/* A call's own timeout not given: the connection's applies. */
#define SH_PY_CONN_TIMEOUT INT64_MIN
/* A timeout argument: absent (NULL) is SH_PY_CONN_TIMEOUT, None no bound
 * (SHOAL_FOREVER), else seconds > 0 in ns. -1 with an exception. */
int sh_py_parse_timeout(PyObject *t, int64_t *ns);
/* None (NULL, no exception) or a non-empty str without NUL. */
const char *sh_py_opt_name(PyObject *name);
/* An id (a positive int) or a name (a non-empty str). */
int sh_py_parse_key(PyObject *k, shoal_id *id, const char **name);
/* A read-only, C-contiguous view of any buffer. */
int sh_py_get_buffer(PyObject *data, Py_buffer *v, const char *what);
int sh_py_parse_dtype(PyObject *o, shoal_dtype *dt);
/* shape: a tuple or list of ints >= 0, at most SHOAL_TENSOR_MAX_DIMS;
 * *bytes: their product times the element size, checked. */
int sh_py_parse_shape(PyObject *o, shoal_dtype dt, int64_t *shape, int *ndim, size_t *bytes);
unsigned sh_py_flags_of(int persist, int replace);
/* A tensor dict as put_tensor_dict takes it: items [(name, data, dtype,
 * shape)] checked (each data a buffer of its shape's bytes), metadata a
 * dict of str or None; total: the blobs' bytes 64-byte aligned. What they
 * borrow is held (keep) until sh_py_items_free. -1 with an exception. */
typedef struct {
	const char *name;
	Py_buffer v;
	shoal_dtype dt;
	int ndim;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS];
} sh_py_item;
typedef struct {
	PyObject *keep;
	sh_py_item *items;
	size_t n, got, nmeta, total;
	const char **keys, **vals;
	size_t *vlens;
} sh_py_items;
int sh_py_items_parse(PyObject *items, PyObject *metadata, sh_py_items *out);
void sh_py_items_free(sh_py_items *it);
/* names(): entries collected (sh_py_names_add, a shoal_list callback: 1
 * stops it when memory ran out), then the list of (name, id, type, bytes)
 * (ok: the walk succeeded; the entries are freed either way). */
typedef struct {
	char *name, *type;
	shoal_id id;
	uint64_t bytes;
} sh_py_entry;
typedef struct {
	sh_py_entry *e;
	size_t n, cap;
	bool nomem;
} sh_py_names;
int sh_py_names_add(const shoal_entry *e, void *ctx);
PyObject *sh_py_names_list(sh_py_names *j, bool ok);

/* ---- remote clients (remote.c) ---- */

extern PyTypeObject ShRemote_Type;

/* ---- isolated extensions (value.c; ext.c the host's side, child.c the extension's) ---- */

extern PyTypeObject ShVal_Type, ShExt_Type;
/* o as a value built in b; keep collects the objects whose memory the
 * value borrows until it is sent. NULL with an exception set. */
shoal_value *sh_py_to_value(shoal_vbuf *b, PyObject *o, PyObject *keep);
/* v as Python objects; tensors are copied into memory of their own, unless
 * shared (a store object) and this side has a connection to the store:
 * then they are views of the object through it. */
PyObject *sh_py_from_value(const shoal_value *v);
PyObject *sh_py_set_value_hooks(PyObject *mod, PyObject *args);
PyObject *sh_py_value_roundtrip(PyObject *mod, PyObject *o);
/* pack_value(obj) -> bytes, unpack_value(bytes) -> obj (stored.c). */
PyObject *sh_py_pack_value(PyObject *mod, PyObject *o);
PyObject *sh_py_unpack_value(PyObject *mod, PyObject *data);
PyObject *sh_py_register_service(PyObject *mod, PyObject *args);
PyObject *sh_py_unregister_service(PyObject *mod, PyObject *args);
PyObject *sh_py_call_host(PyObject *mod, PyObject *args);
PyObject *sh_py_run_extension(PyObject *mod, PyObject *args);
PyObject *sh_py_run_engine(PyObject *mod, PyObject *args);
PyObject *sh_py_tasklets_alive(PyObject *mod, PyObject *unused);
PyObject *sh_py_cluster_supervise(PyObject *mod, PyObject *args);
/* cluster.c: clusters of the task farm (shoal/cluster.h). */
PyObject *sh_py_cluster_start(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_cluster_status(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_cluster_add(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_cluster_stop(PyObject *mod, PyObject *args, PyObject *kw);

/* ---- the task farm (farm.c) ---- */

extern PyTypeObject ShController_Type, ShFarm_Type;

/* A str or an os.PathLike as a filesystem path (a bytes object, new ref). */
int sh_py_fspath(PyObject *in, PyObject **out);
/* A str without NUL bytes, as UTF-8 valid while s lives; what names it
 * in errors. */
const char *sh_py_cstr(PyObject *s, const char *what);

/* ---- tasklets (tasklet.c, channel.c, tasklet_io.c, tasklet_calls.c) ---- */

extern PyTypeObject ShTasklet_Type, ShChannel_Type;
extern PyObject *ShTaskletExit;
/* Shoal's blocking C calls from Python (tasklet.c, its last block).
 * Outside tasklets (the thread has no tasklet state) a call runs with the
 * GIL released, as always. On a thread with tasklet state (in any of its
 * contexts, the main one too) a shoal wait inside the call (a store
 * client's, in the poller) suspends only the calling fiber and runs the
 * thread's others, Python code of theirs: so the GIL is kept (the idle hook
 * lets go of it when every context waits) and the per-tasklet fields of
 * the thread state are saved and restored around the call, as at a switch.
 * With cancel, a kill of the tasklet meanwhile cancels its fiber's wait
 * (SHOAL_ECANCELED from the call); without, the kill waits for the call's
 * end (TaskletExit at the tasklet's next switch point). */
typedef struct sh_tl_blocking {
	void *tl, *me; /* NULL tl: outside tasklets */
	PyThreadState *ts;
	struct sh_tl_blocking *outer; /* the call this one is nested in */
	bool cancel;
	_Alignas(16) unsigned char st[96]; /* tasklet_pystate.h's sh_pystate */
} sh_tl_blocking;
void sh_tl_blocking_begin(sh_tl_blocking *b, bool cancel);
/* Python code about to run inside such a call (a host service an extension
 * calls back, on the calling fiber): the thread state gets the calling
 * context's fields back, as another context may have run since. */
void sh_tl_blocking_python(void);
/* Ends it with the call's rc: true when the tasklet was killed in it and
 * rc is SHOAL_ECANCELED; the caller then raises TaskletExit with
 * sh_tl_raise_killed() once it let go of what it holds. */
bool sh_tl_blocking_end(sh_tl_blocking *b, int rc);
void sh_tl_raise_killed(void);
/* Whether this thread has tasklet state (its calls take the path above). */
bool sh_tl_active(void);

/* A tasklet's turn at obj (a connection whose C calls it makes): on a
 * thread with tasklets, the others of the thread that want obj wait parked
 * in its queue while the holder's call waits, never on obj's mutex, which
 * would block the thread they share. h lives on the holder's stack until
 * sh_tl_turn_give, which hands the turn to the next. Outside tasklets, and
 * for the holder itself (a nested call, from a host service), it does
 * nothing. -1 with an exception (a kill meanwhile). */
typedef struct sh_tl_turn {
	_Alignas(16) unsigned char w[80]; /* first: tasklet_impl.h's sh_wait, its link */
	const void *obj;
	void *owner;	   /* the tasklet holding the turn */
	void *head, *tail; /* the queue, while h holds the turn */
	struct sh_tl_turn *next;
	bool mine;
} sh_tl_turn;
int sh_tl_turn_take(sh_tl_turn *h, const void *obj, const char *what);
void sh_tl_turn_give(sh_tl_turn *h);
/* Whether a tasklet of this thread holds obj's turn now. */
bool sh_tl_turn_held(const void *obj);

/* Adds TaskletExit, tasklet and channel to the module. */
int sh_py_tasklet_init(PyObject *mod);
PyObject *sh_py_getcurrent(PyObject *mod, PyObject *unused);
PyObject *sh_py_schedule(PyObject *mod, PyObject *unused);
PyObject *sh_py_sleep(PyObject *mod, PyObject *secs);
PyObject *sh_py_run(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_select(PyObject *mod, PyObject *args, PyObject *kw);
/* tasklet_io.c: fd waits, to_thread()'s completion */
int sh_py_tasklet_io_init(PyObject *mod);
PyObject *sh_py_wait_readable(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_wait_writable(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *sh_py_worker_idle(PyObject *mod, PyObject *delta);

#endif
