/* An LD_PRELOAD library for benchmarks/harden_probe.py --timing: logs, to the fd in KP_SHIM_FD, the calls
   behind a slow start: every connect, socket, execve, fork and sleep, and every open or access that
   fails for another reason than ENOENT. Built there with cc, where the machine has one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int logfd = -1;
static struct timespec t0;

__attribute__((constructor)) static void init(void) {
  const char *s = getenv("KP_SHIM_FD");
  if (s) logfd = atoi(s);
  clock_gettime(CLOCK_MONOTONIC, &t0);
}

static double ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
}

static void say(const char *fn, const char *arg, long ret, int err, double dt) {
  if (logfd < 0) return;
  char b[600];
  int n = snprintf(b, sizeof b, "%.3f %s %.400s = %ld errno %d (%.3f ms)\n", ms(), fn, arg ? arg : "", ret, err, dt);
  if (n > 0) { ssize_t w = write(logfd, b, n < (int)sizeof b ? n : (int)sizeof b - 1); (void)w; }
}

#define NEXT(name) static __typeof__(name) *real_##name; if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

#define OPENLIKE(name)                                                         \
  int name(const char *p, int f, ...) {                                        \
    NEXT(name);                               \
    mode_t m = 0; va_list a; va_start(a, f); if (f & (O_CREAT | O_TMPFILE)) m = va_arg(a, mode_t); va_end(a); \
    double s = ms(); int r = real_##name(p, f, m); int e = errno;             \
    if (r < 0 && e != ENOENT) say(#name, p, r, e, ms() - s);                   \
    errno = e; return r; }
OPENLIKE(open)
OPENLIKE(open64)

#define OPENATLIKE(name)                                                       \
  int name(int d, const char *p, int f, ...) {                                 \
    NEXT(name);                          \
    mode_t m = 0; va_list a; va_start(a, f); if (f & (O_CREAT | O_TMPFILE)) m = va_arg(a, mode_t); va_end(a); \
    double s = ms(); int r = real_##name(d, p, f, m); int e = errno;          \
    if (r < 0 && e != ENOENT) say(#name, p, r, e, ms() - s);                   \
    errno = e; return r; }
OPENATLIKE(openat)
OPENATLIKE(openat64)

FILE *fopen(const char *p, const char *mo) {
  NEXT(fopen);
  double s = ms(); FILE *r = real_fopen(p, mo); int e = errno;
  if (!r && e != ENOENT) say("fopen", p, -1, e, ms() - s);
  errno = e; return r; }
FILE *fopen64(const char *p, const char *mo) {
  NEXT(fopen64);
  double s = ms(); FILE *r = real_fopen64(p, mo); int e = errno;
  if (!r && e != ENOENT) say("fopen64", p, -1, e, ms() - s);
  errno = e; return r; }
int access(const char *p, int mo) {
  NEXT(access);
  double s = ms(); int r = real_access(p, mo); int e = errno;
  if (r < 0 && e != ENOENT) say("access", p, r, e, ms() - s);
  errno = e; return r; }
int connect(int fd, const struct sockaddr *a, socklen_t l) {
  NEXT(connect);
  char arg[200] = "";
  if (a && a->sa_family == AF_UNIX) {
    const struct sockaddr_un *u = (const void *)a;
    snprintf(arg, sizeof arg, "unix:%s%.100s", u->sun_path[0] ? "" : "@", u->sun_path[0] ? u->sun_path : u->sun_path + 1);
  } else if (a) snprintf(arg, sizeof arg, "family %d", a->sa_family);
  double s = ms(); int r = real_connect(fd, a, l); int e = errno;
  say("connect", arg, r, r < 0 ? e : 0, ms() - s);
  errno = e; return r; }
int socket(int d, int t, int p) {
  NEXT(socket);
  double s = ms(); int r = real_socket(d, t, p); int e = errno;
  char arg[40]; snprintf(arg, sizeof arg, "family %d type %d", d, t);
  say("socket", arg, r, r < 0 ? e : 0, ms() - s);
  errno = e; return r; }
int execve(const char *p, char *const av[], char *const ev[]) {
  NEXT(execve);
  say("execve", p, 0, 0, 0);
  return real_execve(p, av, ev); }
pid_t fork(void) {
  NEXT(fork);
  pid_t r = real_fork(); if (r) say("fork", "", r, 0, 0); return r; }
int usleep(useconds_t u) {
  NEXT(usleep);
  double s = ms(); int r = real_usleep(u); char arg[40]; snprintf(arg, sizeof arg, "%u us", u);
  say("usleep", arg, r, 0, ms() - s); return r; }
int clock_nanosleep(clockid_t c, int fl, const struct timespec *q, struct timespec *rem) {
  NEXT(clock_nanosleep);
  double s = ms(); int r = real_clock_nanosleep(c, fl, q, rem); char arg[60];
  snprintf(arg, sizeof arg, "%s%ld.%09ld s", fl & TIMER_ABSTIME ? "until " : "", (long)q->tv_sec, q->tv_nsec);
  say("clock_nanosleep", arg, r, 0, ms() - s); return r; }
int nanosleep(const struct timespec *q, struct timespec *rem) {
  NEXT(nanosleep);
  double s = ms(); int r = real_nanosleep(q, rem); char arg[60];
  snprintf(arg, sizeof arg, "%ld.%09ld s", (long)q->tv_sec, q->tv_nsec);
  say("nanosleep", arg, r, 0, ms() - s); return r; }
