/* The node-link fault (tests/cluster/slowlink.py): a degraded link, as a NIC that trained at a
 * fraction of its speed. Preloaded (LD_PRELOAD) into every container started on the node, it
 * holds the process's sends on IPv4/IPv6 sockets to TEST_CLUSTER_LINK_BPS bytes a second: a send
 * waits until the link is free of what was sent before it, then goes out whole (a token bucket
 * with no burst: idle time earns no credit). A wait is wall time, not CPU, so the link is as slow
 * on a loaded machine as on a quiet one. Writes to files and pipes are not touched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double rate = -1; /* bytes per second; 0: no limit; -1: not read yet */
static double free_at;   /* CLOCK_MONOTONIC seconds at which the link is next free */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double link_rate(void) {
    if (rate < 0) {
        const char *s = getenv("TEST_CLUSTER_LINK_BPS");
        double r = s ? strtod(s, NULL) : 0;
        rate = r > 0 ? r : 0;
    }
    return rate;
}

static int on_link(int fd) {
    int domain;
    socklen_t len = sizeof domain;
    if (link_rate() == 0 || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
        return 0;
    return domain == AF_INET || domain == AF_INET6;
}

/* Wait until what was sent before has gone out at the link's rate. */
static void wait_free(void) {
    pthread_mutex_lock(&mu);
    double w = free_at - now();
    pthread_mutex_unlock(&mu);
    if (w <= 0)
        return;
    struct timespec t = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static void sent(ssize_t n) {
    if (n <= 0)
        return;
    pthread_mutex_lock(&mu);
    double t = now();
    if (free_at < t)
        free_at = t;
    free_at += (double)n / rate;
    pthread_mutex_unlock(&mu);
}

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);

#define REAL(name) \
    static name##_fn real_##name; \
    if (!real_##name) real_##name = (name##_fn)dlsym(RTLD_NEXT, #name)

#define LIMITED(fd, call) \
    do { \
        int lim = on_link(fd); \
        if (lim) wait_free(); \
        ssize_t r = (call); \
        if (lim) { int e = errno; sent(r); errno = e; } \
        return r; \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    LIMITED(fd, real_write(fd, buf, n));
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev);
    LIMITED(fd, real_writev(fd, iov, cnt));
}

ssize_t send(int fd, const void *buf, size_t n, int flags) {
    REAL(send);
    LIMITED(fd, real_send(fd, buf, n, flags));
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
               socklen_t tolen) {
    REAL(sendto);
    LIMITED(fd, real_sendto(fd, buf, n, flags, to, tolen));
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    REAL(sendmsg);
    LIMITED(fd, real_sendmsg(fd, msg, flags));
}
