/* SPDX-License-Identifier: MIT */
/*
 * ctl_keys.c - dcrfs-ctl keygen: a new Ed25519 signing key (core/sign.h
 * makes it; this prints its id and where it went). No store involved.
 */
#include "config.h"

#include <stdio.h>

#include "common.h"
#include "ctl.h"
#include "json.h"
#include "sign.h"

int cmd_keygen(const char *path, int json)
{
	char id[DCR_KEYID_LEN + 1], pub[4096];
	int ret;

	if (snprintf(pub, sizeof(pub), "%s.pub", path) >= (int)sizeof(pub)) {
		dcr_err("%s: name too long", path);
		return EXIT_FAIL;
	}
	if ((ret = dcr_sign_keygen(path, id)))
		return EXIT_FAIL; /* logged, naming the file (-EEXIST too) */
	if (json) {
		printf("{\"key_id\": \"%s\", \"private_key\": ", id);
		dcr_json_str(stdout, path);
		fputs(", \"public_key\": ", stdout);
		dcr_json_str(stdout, pub);
		fputs("}\n", stdout);
	} else {
		printf("key id %s\nprivate key %s (mode 0600: keep it secret)\n"
		       "public key  %s (give it to mounts: -o trust=)\n", id, path,
		       pub);
	}
	return 0;
}
