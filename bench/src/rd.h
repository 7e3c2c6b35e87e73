/* Stand-in for librdkafka's internal src/rd.h: only what rdkafka_performance.c uses.
 * The example is built outside librdkafka's source tree, where the real header is absent. */
#ifndef BENCH_RD_H
#define BENCH_RD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strndup(), usleep() */
#endif

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define rd_snprintf  snprintf

#endif
