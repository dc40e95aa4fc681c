/* A shared object that is not an extension: it has no shoal_ext_init. */
int ext_noinit_answer(void);
int ext_noinit_answer(void)
{
	return 42;
}
