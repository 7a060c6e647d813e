/* The node-link and link-slow faults (tests/cluster/slowlink.py): a degraded link, as a NIC that
 * trained at a fraction of its speed, or a slow path to some destinations (a spine link between two
 * blocks of nodes). Preloaded (LD_PRELOAD) into every container started on the node, it holds the
 * process's sends on IPv4/IPv6 sockets to TEST_CLUSTER_LINK_BPS bytes a second, and its sends on
 * sockets whose peer is an IPv4 address in TEST_CLUSTER_SLOW_NETS ("a.b.c.d/len" separated by
 * spaces) to TEST_CLUSTER_SLOW_NETS_BPS as well: a send waits until each link it crosses is free
 * of what was sent before it, then goes out whole (a token bucket with no burst: idle time earns no
 * credit). A wait is wall time, not CPU, so the link is as slow on a loaded machine as on a quiet
 * one. Writes to files and pipes are not touched. The peer is the connected address: on a socket
 * the process accepted, the peer is the client's source address (127.0.0.1 unless it bound one), so
 * a connection is held on the side that connected it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double rate = -1; /* bytes per second; 0: no limit; -1: not read yet */
static double free_at;   /* CLOCK_MONOTONIC seconds at which the link is next free */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* The slow destinations: up to MAX_NETS IPv4 networks (host byte order) and their rate. */
#define MAX_NETS 256
static int nets_read;
static int n_nets;
static uint32_t net_addr[MAX_NETS], net_mask[MAX_NETS];
static double nets_rate;    /* bytes per second; 0: no limit */
static double nets_free_at; /* CLOCK_MONOTONIC seconds at which the slow path is next free */

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

static void read_nets(void) {
    pthread_mutex_lock(&mu);
    if (!nets_read) {
        const char *s = getenv("TEST_CLUSTER_SLOW_NETS");
        const char *r = getenv("TEST_CLUSTER_SLOW_NETS_BPS");
        double bps = r ? strtod(r, NULL) : 0;
        nets_rate = bps > 0 ? bps : 0;
        while (s && *s && n_nets < MAX_NETS) {
            unsigned a, b, c, d, len;
            int used = 0;
            if (sscanf(s, " %u.%u.%u.%u/%u%n", &a, &b, &c, &d, &len, &used) != 5 || len > 32)
                break;
            net_addr[n_nets] = (a << 24) | (b << 16) | (c << 8) | d;
            net_mask[n_nets] = len ? 0xffffffffu << (32 - len) : 0;
            n_nets++;
            s += used;
        }
        nets_read = 1;
    }
    pthread_mutex_unlock(&mu);
}

/* 0: not a network socket; 1: on the link; 2: on the link and to a slow destination. */
static int on_link(int fd) {
    int domain;
    socklen_t len = sizeof domain;
    read_nets();
    if ((link_rate() == 0 && nets_rate == 0) ||
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
        (domain != AF_INET && domain != AF_INET6))
        return 0;
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    if (nets_rate == 0 || domain != AF_INET ||
        getpeername(fd, (struct sockaddr *)&peer, &plen) != 0)
        return 1;
    uint32_t ip = ntohl(peer.sin_addr.s_addr);
    for (int i = 0; i < n_nets; i++)
        if ((ip & net_mask[i]) == (net_addr[i] & net_mask[i]))
            return 2;
    return 1;
}

static void sleep_s(double w) {
    if (w <= 0)
        return;
    struct timespec t = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* Wait until what was sent before has gone out at the rate of each link the send crosses. */
static void wait_free(int lim) {
    pthread_mutex_lock(&mu);
    double t = now();
    double w = rate > 0 ? free_at - t : 0;
    double w2 = lim == 2 ? nets_free_at - t : 0;
    pthread_mutex_unlock(&mu);
    sleep_s(w > w2 ? w : w2);
}

static void sent(int lim, ssize_t n) {
    if (n <= 0)
        return;
    pthread_mutex_lock(&mu);
    double t = now();
    if (rate > 0) {
        if (free_at < t)
            free_at = t;
        free_at += (double)n / rate;
    }
    if (lim == 2) {
        if (nets_free_at < t)
            nets_free_at = t;
        nets_free_at += (double)n / nets_rate;
    }
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
        if (lim) wait_free(lim); \
        ssize_t r = (call); \
        if (lim) { int e = errno; sent(lim, r); errno = e; } \
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
