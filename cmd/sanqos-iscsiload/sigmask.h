// Signal masking around libiscsi's and libnfs's synchronous calls, which
// wait in poll() and give up on EINTR ("Poll failed"), leaving the session
// unusable. The Go runtime signals its threads (SIGURG for preemption, and
// others), so every sync call runs with the asynchronous signals blocked on
// its thread and the mask restored after. Process-directed signals (SIGINT,
// SIGTERM) go to another thread; the synchronous fault signals stay
// unblocked so that crashes are reported.
#ifndef SANQOS_SIGMASK_H
#define SANQOS_SIGMASK_H
#include <signal.h>
#include <pthread.h>

static inline void sq_block(sigset_t *old) {
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_BLOCK, &all, old);
}
static inline void sq_restore(sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }
#endif
