/* A task-farm client: maps square over 1..1000 on the controller's
 * engines and adds the results.
 *
 *   ./farm_client /path/to/controller.sock
 *   SHOAL_SECRET_FILE=secret ./farm_client tcp://HOST:PORT
 */
#include <shoal/shoal.h>

#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CONTROLLER (a socket path or tcp://HOST:PORT)\n",
			argv[0]);
		return 2;
	}
	shoal_farm *f;
	int rc = shoal_farm_connect(&f, argv[1]);
	if (rc) {
		fprintf(stderr, "no controller at %s: %s\n", argv[1], shoal_strerror(rc));
		return 1;
	}
	enum { N = 1000 };
	shoal_vbuf *vb;
	if (shoal_vbuf_create(&vb))
		return 1;
	shoal_value *args = shoal_v_array(vb, N);
	for (int i = 0; i < N; i++)
		shoal_v_set(args, (uint32_t)i, shoal_v_int(vb, i + 1));
	/* One task per element: ids first, first + 1, ... */
	shoal_task first;
	if ((rc = shoal_farm_map(f, "square", args, NULL, &first)) != 0 ||
	    (rc = shoal_farm_wait_all(f, shoal_deadline_in(30000000000))) != 0) {
		fprintf(stderr, "tasks: %s\n", shoal_farm_error(f));
		return 1;
	}
	long long sum = 0;
	for (int i = 0; i < N; i++) {
		const shoal_value *r;
		shoal_vbuf_reset(vb);
		if ((rc = shoal_farm_wait(f, first + (shoal_task)i, vb, &r, SHOAL_FOREVER)) != 0) {
			fprintf(stderr, "task %d: %s\n", i, shoal_farm_error(f));
			return 1;
		}
		sum += r->v.i;
	}
	printf("sum of squares 1..%d: %lld\n", N, sum);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	return 0;
}
