/* Stackless's channels between the tasklets of one thread: a rendezvous
 * with a balance (waiters of one direction queued on the waiting
 * contexts' stacks) and a preference (which side runs at once). */
#include "tasklet_impl.h"

typedef struct {
	PyObject_HEAD sh_tl *tl;
	sh_wait *head, *tail; /* waiters, all of one direction */
	Py_ssize_t balance;   /* > 0 senders waiting, < 0 receivers */
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
	/* bound to the thread that makes it, as its tasklets are */
	sh_tl *tl = sh_tl_get();
	if (!tl)
		return NULL;
	ShChannel *c = (ShChannel *)type->tp_alloc(type, 0);
	if (c) {
		c->preference = pref;
		c->tl = tl;
	}
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
	return sh_tl_own(c->tl);
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
		sh_wait *w = c->head;
		sh_tl_prefetch_waiter(tl, w);
		sh_tl_unlink(&c->head, &c->tail, w);
		c->balance++;
		w->value = Py_NewRef(value);
		w->done = true;
		sh_tl_wake(tl, w, 0, c->preference == -1);
		sh_tl_reap(tl);
		Py_RETURN_NONE;
	}
	sh_wait w = {.what = "channel.send", .dir = 1, .value = Py_NewRef(value)};
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
		sh_wait *w = c->head;
		sh_tl_prefetch_waiter(tl, w);
		sh_tl_unlink(&c->head, &c->tail, w);
		c->balance--;
		PyObject *v = w->value;
		w->value = NULL;
		w->done = true;
		sh_tl_wake(tl, w, 0, c->preference == 1);
		sh_tl_reap(tl);
		return v;
	}
	if (c->closing)
		return NULL;
	sh_wait w = {.what = "channel.receive", .dir = -1};
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
		sh_wait *w = c->head;
		sh_tl_unlink(&c->head, &c->tail, w);
		c->balance++;
		sh_fiber_unpark(w->who->fiber, SHOAL_ECLOSED);
	}
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

static PyMethodDef channel_methods[] = {
	{"send", channel_send, METH_O,
	 "send(value)\n\nHands value to a receiver, waiting until one takes it. ValueError once "
	 "the channel is closed."},
	{"receive", channel_receive, METH_NOARGS,
	 "receive() -> value\n\nWaits for a sender's value. ValueError once the channel is "
	 "closed and no sender is left."},
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
	.tp_doc = "channel(preference=-1): a rendezvous between tasklets of one thread "
		  "(Stackless's), iterable until closed.",
	.tp_new = channel_new,
	.tp_dealloc = channel_dealloc,
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = channel_next,
	.tp_methods = channel_methods,
	.tp_getset = channel_getset,
};
