/* Stackless's channels: a rendezvous with a balance (waiters of one
 * direction queued on the waiting contexts' stacks) and a preference
 * (which side runs at once), usable from any thread: a waiter of another
 * thread is woken through its thread (sh_tl_xwake), and the GIL guards
 * the channel's state. select() over sends and receives (Go's) links one
 * waiter per case, all pointing at the select's own wait: the first case
 * to fire takes the others off their channels. */
#include "tasklet_impl.h"

#include <limits.h>

typedef struct {
	PyObject_HEAD sh_wait *head, *tail; /* waiters, all of one direction */
	Py_ssize_t balance;		    /* > 0 senders waiting, < 0 receivers */
	int preference;
	bool closing;
} ShChannel;

static PyObject *channel_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	int pref = -1;
	static char *kwlist[] = {"preference", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:channel", kwlist, &pref))
		return NULL;
	if (pref < -1 || pref > 1)
		return PyErr_Format(
			PyExc_ValueError,
			"channel(preference=) is -1 (the receiver runs at once), 1 (the "
			"sender does) or 0 (neither), not %d",
			pref);
	ShChannel *c = (ShChannel *)type->tp_alloc(type, 0);
	if (c)
		c->preference = pref;
	return (PyObject *)c;
}

static void channel_dealloc(PyObject *self)
{
	/* Parked waiters hold no reference to their channel (Stackless's
	 * channels do not either): they stay parked, and a deadlock names
	 * them. */
	Py_TYPE(self)->tp_free(self);
}

static sh_tl *channel_tl(ShChannel *c)
{
	(void)c;
	return sh_tl_get();
}

/* Takes the first waiter off c. */
static sh_wait *chan_pop(ShChannel *c)
{
	sh_wait *w = c->head;
	sh_tl_unlink(&c->head, &c->tail, w);
	c->balance += w->dir < 0 ? 1 : -1;
	return w;
}

/* One case of select(): its channel and, for a send, the value. */
typedef struct {
	ShChannel *ch;
	PyObject *send; /* borrowed; NULL for a receive */
} sel_case;

/* A select's own wait; its case waiters (cases[i] waits on k[i].ch) point
 * at m. */
typedef struct {
	sh_wait m; /* first: a case's master points here */
	sh_wait *cases;
	const sel_case *k;
	Py_ssize_t n;
	Py_ssize_t fired; /* the case that fired, once m.done */
} sel_wait;

/* w was taken off its channel and completed (got: what a receive gets,
 * owned). For a select's case, the other cases leave their channels and
 * the select's own wait records which case fired. Returns the wait to
 * wake. */
static sh_wait *fire_select(sh_wait *w, PyObject *got);

static inline sh_wait *fire(sh_wait *w, PyObject *got)
{
	if (sh_unlikely(w->is_case))
		return fire_select(w, got);
	if (got)
		w->value = got;
	w->done = true;
	return w;
}

static sh_wait *fire_select(sh_wait *w, PyObject *got)
{
	sh_wait *m = w->u.master;
	sel_wait *s = (sel_wait *)m;
	for (Py_ssize_t i = 0; i < s->n; i++) {
		sh_wait *o = &s->cases[i];
		if (o != w && o->linked) {
			ShChannel *oc = s->k[i].ch;
			sh_tl_unlink(&oc->head, &oc->tail, o);
			oc->balance += o->dir < 0 ? 1 : -1;
		}
	}
	s->fired = w - s->cases;
	m->value = got;
	m->done = true;
	return m;
}

static PyObject *channel_send(PyObject *self, PyObject *value)
{
	ShChannel *c = (ShChannel *)self;
	sh_tl *tl = channel_tl(c);
	if (!tl || sh_tl_check_kill(tl))
		return NULL;
	if (c->closing)
		return PyErr_Format(PyExc_ValueError, "send on a closed channel");
	if (c->balance < 0) {
		sh_tl_prefetch_waiter(tl, c->head);
		sh_wait *w = fire(chan_pop(c), Py_NewRef(value));
		sh_tl_wake(tl, w, 0, c->preference == -1);
		sh_tl_reap(tl);
		Py_RETURN_NONE;
	}
	sh_wait w = {.what = "channel.send", .dir = 1, .value = Py_NewRef(value), .shared = true};
	sh_tl_link(&c->head, &c->tail, &w);
	c->balance++;
	int rc = sh_tl_wait(tl, &w, SHOAL_FOREVER);
	sh_tl_reap(tl);
	if (w.done)
		Py_RETURN_NONE;
	if (w.linked) {
		sh_tl_unlink(&c->head, &c->tail, &w);
		c->balance--;
	}
	Py_DECREF(w.value);
	return sh_tl_wait_error(tl, rc, "channel.send");
}

/* NULL with no exception set: closed and empty. */
static PyObject *channel_recv(ShChannel *c, sh_tl *tl)
{
	if (sh_tl_check_kill(tl))
		return NULL;
	if (c->balance > 0) {
		sh_tl_prefetch_waiter(tl, c->head);
		sh_wait *w = chan_pop(c);
		PyObject *v = w->value;
		w->value = NULL;
		w = fire(w, NULL);
		sh_tl_wake(tl, w, 0, c->preference == 1);
		sh_tl_reap(tl);
		return v;
	}
	if (c->closing)
		return NULL;
	sh_wait w = {.what = "channel.receive", .dir = -1, .shared = true};
	sh_tl_link(&c->head, &c->tail, &w);
	c->balance--;
	int rc = sh_tl_wait(tl, &w, SHOAL_FOREVER);
	sh_tl_reap(tl);
	if (w.done)
		return w.value;
	if (w.linked) { /* close() unlinked it already */
		sh_tl_unlink(&c->head, &c->tail, &w);
		c->balance++;
	}
	if (rc == SHOAL_ECLOSED)
		return NULL;
	return sh_tl_wait_error(tl, rc, "channel.receive");
}

static PyObject *channel_receive(PyObject *self, PyObject *unused)
{
	(void)unused;
	ShChannel *c = (ShChannel *)self;
	sh_tl *tl = channel_tl(c);
	if (!tl)
		return NULL;
	PyObject *v = channel_recv(c, tl);
	if (!v && !PyErr_Occurred())
		PyErr_SetString(PyExc_ValueError, "receive from a closed channel");
	return v;
}

static PyObject *channel_next(PyObject *self)
{
	ShChannel *c = (ShChannel *)self;
	sh_tl *tl = channel_tl(c);
	return tl ? channel_recv(c, tl) : NULL; /* NULL alone: StopIteration */
}

static PyObject *channel_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	ShChannel *c = (ShChannel *)self;
	sh_tl *tl = channel_tl(c);
	if (!tl)
		return NULL;
	c->closing = true;
	/* Senders already waiting are still received; receivers would wait
	 * for ever. */
	while (c->balance < 0) {
		sh_wait *w = chan_pop(c);
		if (w->is_case) /* a select's receive: that case fires, with CLOSED */
			sh_tl_wake(tl, fire(w, Py_NewRef(ShChanClosed)), 0, false);
		else
			sh_tl_wake(tl, w, SHOAL_ECLOSED, false);
	}
	sh_tl_reap(tl);
	Py_RETURN_NONE;
}

static PyObject *channel_balance(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromSsize_t(((ShChannel *)self)->balance);
}

static PyObject *channel_closing(PyObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(((ShChannel *)self)->closing);
}

static PyObject *channel_closed(PyObject *self, void *unused)
{
	(void)unused;
	ShChannel *c = (ShChannel *)self;
	return PyBool_FromLong(c->closing && c->balance == 0);
}

static PyObject *channel_get_pref(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromLong(((ShChannel *)self)->preference);
}

static int channel_set_pref(PyObject *self, PyObject *v, void *unused)
{
	(void)unused;
	long p = v ? PyLong_AsLong(v) : 2;
	if (p == -1 && PyErr_Occurred())
		return -1;
	if (p < -1 || p > 1) {
		PyErr_SetString(PyExc_ValueError,
				"preference is -1 (the receiver runs at once), 1 (the sender "
				"does) or 0 (neither)");
		return -1;
	}
	((ShChannel *)self)->preference = (int)p;
	return 0;
}

static PyObject *channel_receive_case(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyTuple_Pack(1, self);
}

static PyObject *channel_send_case(PyObject *self, PyObject *value)
{
	return PyTuple_Pack(2, self, value);
}

/* ---- select ---- */

static int parse_case(PyObject *item, Py_ssize_t i, sel_case *out)
{
	if (PyObject_TypeCheck(item, &ShChannel_Type)) {
		out->ch = (ShChannel *)item;
		out->send = NULL;
		return 0;
	}
	if (PyTuple_Check(item) && (PyTuple_GET_SIZE(item) == 1 || PyTuple_GET_SIZE(item) == 2) &&
	    PyObject_TypeCheck(PyTuple_GET_ITEM(item, 0), &ShChannel_Type)) {
		out->ch = (ShChannel *)PyTuple_GET_ITEM(item, 0);
		out->send = PyTuple_GET_SIZE(item) == 2 ? PyTuple_GET_ITEM(item, 1) : NULL;
		return 0;
	}
	PyErr_Format(PyExc_TypeError,
		     "select() wants cases ch.receive_case() or ch.send_case(value) (the tuples "
		     "(ch,) and (ch, value)) or a channel, not %.100s at index %zd",
		     Py_TYPE(item)->tp_name, i);
	return -1;
}

/* Whether case k could proceed now: a waiter of the other side, or a
 * closed channel (a receive gets CLOSED, a send raises). */
static bool case_ready(const sel_case *k)
{
	if (k->ch->closing) /* senders left are still received */
		return true;
	return k->send ? k->ch->balance < 0 : k->ch->balance > 0;
}

/* (i, v), v's reference taken */
static PyObject *pair(Py_ssize_t i, PyObject *v)
{
	return Py_BuildValue("(nN)", i, v);
}

/* Runs ready case i at once. */
static PyObject *select_now(sh_tl *tl, sel_case *k, Py_ssize_t i)
{
	ShChannel *c = k->ch;
	if (k->send) {
		if (c->closing)
			return PyErr_Format(PyExc_ValueError,
					    "select(): case %zd sends on a closed channel", i);
		sh_wait *w = fire(chan_pop(c), Py_NewRef(k->send));
		sh_tl_wake(tl, w, 0, false);
		sh_tl_reap(tl);
		return pair(i, Py_NewRef(Py_None));
	}
	if (c->balance <= 0) /* closed and no sender left */
		return pair(i, Py_NewRef(ShChanClosed));
	sh_wait *w = chan_pop(c);
	PyObject *v = w->value;
	w->value = NULL;
	sh_tl_wake(tl, fire(w, NULL), 0, false);
	sh_tl_reap(tl);
	return pair(i, v);
}

/* Links one waiter per case and parks until one fires, the deadline, a
 * kill or a deadlock. */
static PyObject *select_wait(sh_tl *tl, sel_case *k, Py_ssize_t n, int64_t deadline)
{
	sel_wait s = {.m = {.what = "select", .shared = true, .who = tl->current}, .k = k, .n = n};
	sh_wait few[8];
	s.cases = n <= 8 ? few : PyMem_Calloc((size_t)n, sizeof(sh_wait));
	if (!s.cases)
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < n; i++) {
		sh_wait *w = &s.cases[i];
		*w = (sh_wait){.what = "select",
			       .who = tl->current,
			       .u.master = &s.m,
			       .is_case = true,
			       .dir = k[i].send ? 1 : -1,
			       .value = Py_XNewRef(k[i].send)};
		sh_tl_link(&k[i].ch->head, &k[i].ch->tail, w);
		k[i].ch->balance += w->dir;
	}
	int rc = sh_tl_wait(tl, &s.m, deadline);
	for (Py_ssize_t i = 0; i < n; i++) {
		sh_wait *w = &s.cases[i];
		if (w->linked) {
			ShChannel *c = k[i].ch;
			sh_tl_unlink(&c->head, &c->tail, w);
			c->balance -= w->dir;
		}
	}
	/* the lists are consistent again: values may be let go of */
	for (Py_ssize_t i = 0; i < n; i++)
		Py_XDECREF(s.cases[i].value);
	if (s.cases != few)
		PyMem_Free(s.cases);
	sh_tl_reap(tl);
	if (s.m.done)
		return pair(s.fired, s.m.value ? s.m.value : Py_NewRef(Py_None));
	return sh_tl_wait_error(tl, rc, "select");
}

PyObject *sh_py_select(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	PyObject *cases, *tmo = Py_None;
	static char *kwlist[] = {"cases", "timeout", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:select", kwlist, &cases, &tmo))
		return NULL;
	/* timeout=0 asks whether a case is ready now (Go's default:) */
	int64_t ns = 0;
	int zero = tmo != Py_None && PyNumber_Check(tmo) ? PyObject_Not(tmo) : 0;
	if (zero < 0 || (!zero && sh_py_parse_timeout(tmo, &ns) != 0))
		return NULL;
	PyObject *seq = PySequence_Fast(cases, "select() wants a list of cases");
	if (!seq)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	PyObject *res = NULL;
	sel_case *k = NULL;
	if (n == 0 || n > INT_MAX) {
		PyErr_Format(PyExc_ValueError, "select() wants 1 to %d cases, not %zd", INT_MAX, n);
		goto out;
	}
	k = PyMem_Calloc((size_t)n, sizeof(*k));
	if (!k) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (parse_case(PySequence_Fast_GET_ITEM(seq, i), i, &k[i]) != 0)
			goto out;
	/* a channel's waiters are all of one direction */
	for (Py_ssize_t i = 0; i < n; i++)
		for (Py_ssize_t j = 0; j < i; j++)
			if (k[i].ch == k[j].ch && !k[i].send != !k[j].send) {
				PyErr_Format(PyExc_ValueError,
					     "select(): cases %zd and %zd send and receive on the "
					     "same channel; a select waits on one side of a "
					     "channel",
					     j, i);
				goto out;
			}
	sh_tl *tl = sh_tl_get();
	if (!tl || sh_tl_check_kill(tl))
		goto out;
	/* a ready case chosen at random, as Go's select does: no case starves */
	Py_ssize_t nready = 0;
	for (Py_ssize_t i = 0; i < n; i++)
		nready += case_ready(&k[i]);
	if (nready) {
		Py_ssize_t pick = (Py_ssize_t)(sh_rand(tl->sched) % (uint64_t)nready);
		for (Py_ssize_t i = 0; i < n; i++)
			if (case_ready(&k[i]) && pick-- == 0) {
				res = select_now(tl, &k[i], i);
				break;
			}
		goto out;
	}
	if (ns == 0) {
		PyErr_SetString(PyExc_TimeoutError, "select: no case was ready (timeout=0)");
		goto out;
	}
	res = select_wait(tl, k, n, ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(ns));
out:
	PyMem_Free(k);
	Py_DECREF(seq);
	return res;
}

/* ---- CLOSED ---- */

static PyObject *closed_repr(PyObject *self)
{
	(void)self;
	return PyUnicode_FromString("shoal.CLOSED");
}

static PyTypeObject ShClosed_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal._Closed",
	.tp_basicsize = sizeof(PyObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "What select() gives for a receive case whose channel is closed and empty.",
	.tp_repr = closed_repr,
};

PyObject *ShChanClosed;

int sh_py_channel_init(PyObject *mod)
{
	if (PyType_Ready(&ShClosed_Type) != 0)
		return -1;
	ShChanClosed = PyObject_New(PyObject, &ShClosed_Type);
	if (!ShChanClosed || PyModule_AddObjectRef(mod, "CLOSED", ShChanClosed) != 0)
		return -1;
	return PyModule_AddType(mod, &ShChannel_Type);
}

static PyMethodDef channel_methods[] = {
	{"send", channel_send, METH_O,
	 "send(value)\n\nHands value to a receiver, waiting until one takes it. ValueError once "
	 "the channel is closed."},
	{"receive", channel_receive, METH_NOARGS,
	 "receive() -> value\n\nWaits for a sender's value. ValueError once the channel is "
	 "closed and no sender is left."},
	{"receive_case", channel_receive_case, METH_NOARGS,
	 "receive_case() -> (channel,)\n\nA receive case for select()."},
	{"send_case", channel_send_case, METH_O,
	 "send_case(value) -> (channel, value)\n\nA send case for select()."},
	{"close", channel_close, METH_NOARGS,
	 "close()\n\nNo more sends; senders already waiting are still received, receivers "
	 "waiting when none is left get ValueError (iteration ends)."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef channel_getset[] = {
	{"balance", channel_balance, NULL,
	 "Senders waiting (> 0), or minus the receivers waiting (< 0).", NULL},
	{"closing", channel_closing, NULL, "close() was called.", NULL},
	{"closed", channel_closed, NULL, "Closed and no sender left.", NULL},
	{"preference", channel_get_pref, channel_set_pref,
	 "-1: a send to a waiting receiver runs the receiver at once (Stackless's default); "
	 "1: a receive from a waiting sender runs the sender at once; 0: neither (the woken "
	 "side runs after those already runnable).",
	 NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShChannel_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.channel",
	.tp_basicsize = sizeof(ShChannel),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "channel(preference=-1): a rendezvous between tasklets (Stackless's), of "
		  "any threads, iterable until closed.",
	.tp_new = channel_new,
	.tp_dealloc = channel_dealloc,
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = channel_next,
	.tp_methods = channel_methods,
	.tp_getset = channel_getset,
};
