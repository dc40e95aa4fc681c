/* shoal._shoal.pack_value / unpack_value: a Python value as bytes and back
 * (shoal_value_encode / shoal_value_decode, the encoding calls carry), for
 * Client.put of plain Python values: lists, dicts, strings, numbers, and
 * the kinds shoal.isolate passes. The bytes of a stored object may come
 * from anyone (another process, another host's store): they are decoded
 * as an extension's results are (fuzz_pyvalue covers that path), never
 * unpickled. */
#include "module.h"

#include <shoal/rpc.h>

PyObject *sh_py_pack_value(PyObject *mod, PyObject *o)
{
	(void)mod;
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b) != 0)
		return PyErr_NoMemory();
	PyObject *keep = PyList_New(0), *r = NULL;
	shoal_value *v = keep ? sh_py_to_value(b, o, keep) : NULL;
	const void *p;
	size_t n;
	if (v) {
		int rc = shoal_value_encode(b, v, &p, &n);
		if (rc)
			sh_py_raise(rc, "encoding the value");
		else
			r = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
	}
	Py_XDECREF(keep);
	shoal_vbuf_free(b);
	return r;
}

PyObject *sh_py_unpack_value(PyObject *mod, PyObject *data)
{
	(void)mod;
	Py_buffer in;
	if (PyObject_GetBuffer(data, &in, PyBUF_SIMPLE) != 0)
		return NULL;
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b) != 0) {
		PyBuffer_Release(&in);
		return PyErr_NoMemory();
	}
	char why[256];
	shoal_value *v;
	PyObject *r = NULL;
	int rc = shoal_value_decode(b, in.buf, (size_t)in.len, &v, why, sizeof(why));
	if (rc)
		sh_py_raisef(ShInvalidInput, rc, "a stored value that is not one: %s",
			     why[0] ? why : sh_py_strerror(rc));
	else
		r = sh_py_from_value(v);
	shoal_vbuf_free(b);
	PyBuffer_Release(&in);
	return r;
}
