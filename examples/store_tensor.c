/* A store client: puts a 2x3 float tensor under a name, gets it back by
 * name (mapped read-only, no copy) and prints it, then deletes it.
 *
 *   shoald &                      # the store, at its default socket
 *   ./store_tensor                # or: ./store_tensor /path/to/shoald.sock
 */
#include <shoal/shoal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	/* shoald's socket: the one given, else $SHOAL_SOCKET, else
	 * shoald.sock in the user's private socket directory. */
	char dflt[256];
	const char *path = argc > 1 ? argv[1] : getenv("SHOAL_SOCKET");
	if (!path) {
		if (shoal_socket_dir(dflt, sizeof(dflt) - sizeof("/shoald.sock")) != 0) {
			fprintf(stderr, "no private socket directory: pass the socket's path\n");
			return 1;
		}
		snprintf(dflt + strlen(dflt), sizeof("/shoald.sock"), "/shoald.sock");
		path = dflt;
	}
	shoal_client *c;
	int rc = shoal_connect(&c, path);
	if (rc) {
		fprintf(stderr, "no store at %s: %s\n", path, shoal_strerror(rc));
		return 1;
	}
	/* Build the object in shared memory, then seal it: from then on no
	 * one can change it, and every reader maps the same pages. */
	shoal_builder *b;
	void *data;
	int64_t shape[2] = {2, 3};
	shoal_id id;
	if ((rc = shoal_builder_create(c, "tensor", &b)) != 0 ||
	    (rc = shoal_node_set_tensor(shoal_builder_root(b), SHOAL_DT_F32, 2, shape, &data)) !=
		    0) {
		fprintf(stderr, "building: %s\n", shoal_client_error(c));
		return 1;
	}
	float *w = data;
	for (int i = 0; i < 6; i++)
		w[i] = (float)i / 2;
	if ((rc = shoal_builder_seal(b, "example-weights", SHOAL_REPLACE, &id)) != 0) {
		fprintf(stderr, "sealing: %s\n", shoal_client_error(c));
		return 1;
	}
	/* Any process can now get it by name. */
	shoal_object *o;
	shoal_tensor t;
	if ((rc = shoal_get_by_name(c, "example-weights", &o)) != 0 ||
	    (rc = shoal_node_tensor(shoal_object_root(o), &t)) != 0) {
		fprintf(stderr, "getting: %s\n", shoal_client_error(c));
		return 1;
	}
	const float *r = t.data;
	printf("example-weights: %s [%lld, %lld]:", shoal_dtype_name(t.dtype),
	       (long long)t.shape[0], (long long)t.shape[1]);
	for (int i = 0; i < 6; i++)
		printf(" %g", r[i]);
	printf("\n");
	shoal_object_release(o);
	rc = shoal_delete(c, "example-weights");
	shoal_disconnect(c);
	return rc ? 1 : 0;
}
