/* shoal-test: threaded */
/* Tests of the object store against a real store (embedded: a server
 * thread with its own scheduler, on a real unix socket) and real client
 * processes: put and get of bytes and tensor dicts, zero-copy sharing of
 * pages between processes, kernel-enforced immutability, references and
 * deferred frees, transient objects, clients killed mid-create, capacity,
 * 100 concurrent clients, and malformed frames of every kind. */
#include "test.h"

#include "store/proto.h"
#include "wire/wire.h"

#include <dlpack/dlpack.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static shoal_store *open_store(size_t size)
{
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.size = size;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &o));
	return s;
}

static shoal_client *connect_to(shoal_store *s)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	return c;
}

static shoal_store_stat stat_of(shoal_client *c)
{
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	return st;
}

SH_TEST(put_get_bytes)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	shoal_id id = 0;
	CHECK_OK(shoal_put_bytes(c, "greeting", "hello", 5, 0, &id));
	CHECK(id != 0);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "greeting", &o));
	CHECK_EQ(shoal_object_id(o), id);
	const shoal_node *r = shoal_object_root(o);
	CHECK_STR(shoal_node_type(r), "bytes");
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(r, 0, &p, &n));
	CHECK_EQ(n, 5);
	CHECK(memcmp(p, "hello", 5) == 0);
	CHECK_OK(shoal_object_release(o));
	/* by id too; a name is taken until deleted */
	CHECK_OK(shoal_get(c, id, &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_RC(shoal_put_bytes(c, "greeting", "x", 1, 0, NULL), SHOAL_EEXIST);
	CHECK(strstr(shoal_client_error(c), "greeting") != NULL);
	CHECK_RC(shoal_get_by_name(c, "nope", &o), SHOAL_ENOENT);
	CHECK(strstr(shoal_client_error(c), "nope") != NULL);
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, 1);
	CHECK_EQ(st.names, 1);
	CHECK_EQ(st.clients, 1);
	CHECK(st.used >= 5);
	CHECK_OK(shoal_delete(c, "greeting"));
	st = stat_of(c);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}
