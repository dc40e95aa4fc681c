/* Stack overflow reports. A fiber that runs off its stack hits the guard
 * page; the SIGSEGV handler, on an alternate signal stack (the faulting
 * stack has no room left), names the fiber on stderr and lets the default
 * action kill the process, so the overflow is loud, never silent memory
 * corruption. Faults elsewhere go to whatever handler was there before. */
#include "fiber_impl.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

/* Faults this far below a fiber's stack are blamed on the fiber: a large
 * frame can jump over the guard page into a neighbour's guard. */
#define BLAME_BELOW (256 * 1024)

static struct sigaction old_segv, old_bus;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static size_t put_str(char *b, size_t at, size_t cap, const char *s)
{
	while (*s && at + 1 < cap)
		b[at++] = *s++;
	return at;
}

static size_t put_u64(char *b, size_t at, size_t cap, uint64_t v, int base)
{
	char tmp[24];
	int n = 0;
	do {
		unsigned d = (unsigned)(v % (unsigned)base);
		tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
		v /= (unsigned)base;
	} while (v);
	while (n && at + 1 < cap)
		b[at++] = tmp[--n];
	return at;
}

static void chain(int sig, siginfo_t *info, void *uctx)
{
	struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
	if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
		old->sa_sigaction(sig, info, uctx);
		return;
	}
	if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/* Returning re-executes the faulting access under the default
	 * action, which kills us with the right signal and a core. */
	signal(sig, SIG_DFL);
}

static void on_fault(int sig, siginfo_t *info, void *uctx)
{
	shoal_sched *s = sh_tls_sched;
	shoal_fiber *f = s ? s->cur : NULL;
	const char *a = info->si_addr;
	if (f && !f->is_root) {
		const char *base = f->stack.base;
		bool near = a < base && (size_t)(base - a) <= BLAME_BELOW;
		if (near || sh_stack_is_guard(s->pools, a)) {
			char b[320];
			size_t n = 0;
			n = put_str(b, n, sizeof(b), "shoal: stack overflow in fiber '");
			if (f->has_name) {
				n = put_str(b, n, sizeof(b), f->name);
			} else {
				n = put_str(b, n, sizeof(b), "fiber-");
				n = put_u64(b, n, sizeof(b), f->id, 10);
			}
			n = put_str(b, n, sizeof(b), "' (id ");
			n = put_u64(b, n, sizeof(b), f->id, 10);
			n = put_str(b, n, sizeof(b), "): fault at 0x");
			n = put_u64(b, n, sizeof(b), (uint64_t)(uintptr_t)a, 16);
			n = put_str(b, n, sizeof(b), ", stack of ");
			n = put_u64(b, n, sizeof(b), f->stack.size / 1024, 10);
			n = put_str(b, n, sizeof(b),
				    f->stack.guarded ? " KiB with guard page" : " KiB, unguarded");
			n = put_str(b, n, sizeof(b), "; give it a larger stack_size\n");
			sh_write_all(2, b, n);
			signal(sig, SIG_DFL);
			return;
		}
	}
	chain(sig, info, uctx);
}

static void install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
}

int sh_overflow_thread_init(shoal_sched *s)
{
	pthread_once(&install_once, install);
	stack_t cur;
	if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= 16384)
		return 0; /* the thread already has one (a sanitizer's, or the app's) */
	size_t sz = 64 * 1024;
	void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return SHOAL_ENOMEM;
	stack_t st = {.ss_sp = m, .ss_size = sz, .ss_flags = 0};
	if (sigaltstack(&st, NULL) != 0) {
		int rc = shoal_errno();
		munmap(m, sz);
		return rc;
	}
	s->altstack = m;
	s->altstack_size = sz;
	return 0;
}

void sh_overflow_thread_fini(shoal_sched *s)
{
	if (!s->altstack)
		return;
	stack_t cur;
	if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == s->altstack) {
		stack_t off = {.ss_flags = SS_DISABLE};
		sigaltstack(&off, NULL);
	}
	munmap(s->altstack, s->altstack_size);
	s->altstack = NULL;
}
