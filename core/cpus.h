/* SPDX-License-Identifier: MIT */
/*
 * cpus.h - the CPU budget: how many CPUs this process may use, found
 * from the machine, never from the source. Every CPU-bound pool (the
 * commit's encoders, the mount's decoders and writers, verify --deep,
 * compaction, the delta view's build) is sized from it, so a rollout pod
 * limited to 8 CPUs gets 8, not the host's 192, and a 16-core node gets
 * 16, not the 2 of the machine the code was written on.
 *
 * The budget is the number of CPUs in the affinity mask
 * (sched_getaffinity: taskset, cpusets), capped by the cgroup v2 CPU
 * quota (cpu.max, quota/period rounded up) of this process's cgroup and
 * of every cgroup above it. Thread-safe; computed at each call (a few
 * small reads), so callers compute it once where they size a pool.
 */
#ifndef DCR_CPUS_H
#define DCR_CPUS_H

/** The CPUs this process may use now: the affinity mask's count capped
 * by the cgroup v2 quota, at least 1. */
int dcr_cpu_budget(void);

/** The CPUs a cgroup v2 `cpu.max` line allows ("QUOTA PERIOD" or
 * "max PERIOD"): quota/period rounded up, at least 1; 0 when the line
 * sets no limit ("max") or cannot be read. Exposed for tests. */
int dcr_cpu_quota_parse(const char *line);

/** Sizes a pool: @requested when > 0 (an option such as threads=N,
 * capped at 1024), else the budget. */
int dcr_cpu_threads(int requested);

#endif
