/* tlsfill.c - a TLSDESC library whose TLS block is as large as glibc's
 * optional static TLS surplus (glibc.rtld.optional_static_tls, 512 bytes):
 * dlopen'ed first, it takes the surplus, so a library dlopen'ed after it
 * gets dynamic TLS, reached through the DTV. */
__thread char tls_fill[512] = {1};

int tls_fill_touch(void)
{
	return tls_fill[0]++;
}
