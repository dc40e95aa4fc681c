/* A host: starts the extension ext_greet.so in its own sandboxed process,
 * calls it, and shows how its errors come back.
 *
 *   ./ext_host ./ext_greet.so
 */
#include <shoal/shoal.h>

#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s EXTENSION.so\n", argv[0]);
		return 2;
	}
	shoal_ext_config cfg;
	shoal_ext_config_init(&cfg);
	cfg.path = argv[1];
	cfg.sandbox = SHOAL_SANDBOX_BASIC;
	cfg.call_timeout_ns = 5000000000; /* 5 s for a call that gives no deadline */
	shoal_ext *e;
	int rc = shoal_ext_start(&e, &cfg);
	if (rc) {
		fprintf(stderr, "start: %s\n", shoal_strerror(rc));
		return 1;
	}
	shoal_vbuf *vb;
	if (shoal_vbuf_create(&vb))
		return 1;
	shoal_value *args = shoal_v_array(vb, 2);
	shoal_v_set(args, 0, shoal_v_cstr(vb, "shoal"));
	shoal_v_set(args, 1, shoal_v_int(vb, 2));
	const shoal_value *r;
	if ((rc = shoal_ext_call(e, "greet", args, vb, &r, 0)) != 0) {
		fprintf(stderr, "greet: %s\n", shoal_ext_error(e));
		return 1;
	}
	printf("%.*s\n", (int)r->n, r->v.s);
	/* A wrong call fails with the extension's code and message. */
	rc = shoal_ext_call(e, "greet", shoal_v_int(vb, 7), vb, &r, 0);
	printf("greet(7): %s: %s\n", shoal_strerror(rc), shoal_ext_error(e));
	shoal_vbuf_free(vb);
	return shoal_ext_stop(e) ? 1 : 0;
}
