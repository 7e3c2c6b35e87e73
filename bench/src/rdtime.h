/* Stand-in for librdkafka's internal src/rdtime.h: a monotonic clock in microseconds. */
#ifndef BENCH_RDTIME_H
#define BENCH_RDTIME_H

#include <stdint.h>
#include <time.h>

typedef int64_t rd_ts_t;

static inline rd_ts_t rd_clock(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (rd_ts_t)ts.tv_sec * 1000000 + (rd_ts_t)ts.tv_nsec / 1000;
}

#endif
