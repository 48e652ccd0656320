/* SPDX-License-Identifier: MIT */
/*
 * cpus.c - the CPU budget (see cpus.h): the affinity mask capped by the
 * cgroup v2 quota of this process's cgroup and its ancestors.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "cpus.h"

#define THREADS_MAX 1024
#define CGROUP_ROOT "/sys/fs/cgroup"

int dcr_cpu_quota_parse(const char *line)
{
	char q[32];
	uint64_t quota, period;

	if (!line || sscanf(line, "%31s %" SCNu64, q, &period) != 2 || period == 0)
		return 0;
	if (strcmp(q, "max") == 0)
		return 0;
	char *end;
	errno = 0;
	quota = strtoull(q, &end, 10);
	if (errno || *end || quota == 0)
		return 0;
	uint64_t n = (quota + period - 1) / period;
	return n > THREADS_MAX ? THREADS_MAX : (int)DCR_MAX(n, 1);
}

/* The cgroup v2 path of this process ("0::/a/b" in /proc/self/cgroup),
 * or "" when there is none (cgroup v1 only, or no /proc). */
static void own_cgroup(char *path, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];

	path[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, cap, "%s", line + 3);
			break;
		}
	}
	fclose(f);
}

/* The smallest quota over the cgroup at @rel and its ancestors; 0: none. */
static int cgroup_quota(const char *rel)
{
	char dir[4096], file[4200], line[128];
	int best = 0;

	snprintf(dir, sizeof(dir), "%s", rel);
	for (;;) {
		snprintf(file, sizeof(file), CGROUP_ROOT "%s/cpu.max",
			 strcmp(dir, "/") == 0 ? "" : dir);
		FILE *f = fopen(file, "re");
		if (f) {
			if (fgets(line, sizeof(line), f)) {
				int n = dcr_cpu_quota_parse(line);
				if (n > 0 && (best == 0 || n < best))
					best = n;
			}
			fclose(f);
		}
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			break;
		*slash = '\0';
	}
	return best;
}

int dcr_cpu_budget(void)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0) {
		long on = sysconf(_SC_NPROCESSORS_ONLN);
		n = on > 0 ? (int)on : 1;
	}
	char cg[4096];
	own_cgroup(cg, sizeof(cg));
	if (cg[0] == '/') {
		int q = cgroup_quota(cg);
		if (q > 0 && q < n)
			n = q;
	}
	return DCR_MAX(1, DCR_MIN(n, THREADS_MAX));
}

int dcr_cpu_threads(int requested)
{
	if (requested > 0)
		return DCR_MIN(requested, THREADS_MAX);
	return dcr_cpu_budget();
}
