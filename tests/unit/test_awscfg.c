/* SPDX-License-Identifier: MIT */
/* Unit tests for store/awscfg.c: AWS credential and config resolution. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "awscfg.h"
#include "common.h"
#include "testutil.h"

static const char *const vars[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
	"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL",
	"AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
};

struct fx {
	char *dir;
	char creds[512], conf[512];
};

static void put_file(const char *path, const char *text, mode_t mode)
{
	assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	for (size_t i = 0; i < DCR_ARRAY_SIZE(vars); i++)
		unsetenv(vars[i]);
	f->dir = tu_mkdtemp("awscfg");
	setenv("HOME", f->dir, 1); /* no real ~/.aws */
	snprintf(f->creds, sizeof(f->creds), "%s/credentials", f->dir);
	snprintf(f->conf, sizeof(f->conf), "%s/config", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	tu_rm_rf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

static const struct dcr_store_cfg no_opts = { .path_style = -1 };

static void test_ini(void **state)
{
	const char *t =
		"# comment\n"
		"[default]\n"
		"region = eu-west-1\n"
		"s3 =\n"
		"  addressing_style = path\n"
		"  endpoint_url = http://s3.local:9000\n"
		"endpoint_url=http://all.local\n"
		"[profile  two ]\n"
		"; other comment\n"
		"region=ap-south-1\r\n"
		"[broken\n"
		"region = nope\n";
	char *v = NULL;

	(void)state;
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "default", NULL, "region", &v), 0);
	assert_string_equal(v, "eu-west-1");
	free(v), v = NULL;
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "default", "s3", "addressing_style", &v), 0);
	assert_string_equal(v, "path");
	free(v), v = NULL;
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "default", "s3", "endpoint_url", &v), 0);
	assert_string_equal(v, "http://s3.local:9000");
	free(v), v = NULL;
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "default", NULL, "endpoint_url", &v), 0);
	assert_string_equal(v, "http://all.local");
	free(v), v = NULL;
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "default", NULL, "addressing_style", &v), -ENOENT);
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "profile two", NULL, "region", &v), 0);
	assert_string_equal(v, "ap-south-1");
	free(v), v = NULL;
	/* an unterminated header opens no section */
	assert_int_equal(dcr_aws_ini_get(t, strlen(t), "broken", NULL, "region", &v), -ENOENT);
	/* no NUL needed: a cut buffer ends where it ends */
	assert_int_equal(dcr_aws_ini_get(t, 20, "default", NULL, "region", &v), -ENOENT);
}

static void test_env(void **state)
{
	struct dcr_aws_cfg c;

	(void)state;
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
	setenv("AWS_SESSION_TOKEN", "tok", 1);
	setenv("AWS_DEFAULT_REGION", "us-west-2", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7480/", 1);
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), 0);
	assert_string_equal(c.access_key, "AKENV");
	assert_string_equal(c.secret_key, "secret-env");
	assert_string_equal(c.session_token, "tok");
	assert_string_equal(c.region, "us-west-2");
	assert_string_equal(c.endpoint, "http://127.0.0.1:7480");
	assert_int_equal(c.path_style, -1);
	assert_string_equal(c.cred_source, "environment");
	dcr_aws_cfg_free(&c);

	/* AWS_REGION beats AWS_DEFAULT_REGION, _S3 beats the generic URL,
	 * options beat both */
	setenv("AWS_REGION", "eu-central-1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "https://s3.example", 1);
	assert_int_equal(dcr_aws_cfg_load(&no_opts, &c), 0);
	assert_string_equal(c.region, "eu-central-1");
	assert_string_equal(c.endpoint, "https://s3.example");
	dcr_aws_cfg_free(&c);
	struct dcr_store_cfg o = { .region = "r1", .endpoint = "http://h:1", .path_style = 0 };
	assert_int_equal(dcr_aws_cfg_load(&o, &c), 0);
	assert_string_equal(c.region, "r1");
	assert_string_equal(c.endpoint, "http://h:1");
	assert_int_equal(c.path_style, 0);
	dcr_aws_cfg_free(&c);

	setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), 0);
	assert_null(c.endpoint);
	dcr_aws_cfg_free(&c);

	/* half a key pair is an error, not anonymous access */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), -EINVAL);

	/* bad endpoints */
	setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
	o = (struct dcr_store_cfg){ .endpoint = "s3.example.com", .path_style = -1 };
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);
	o.endpoint = "http://host/path";
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);
}

static void test_profiles(void **state)
{
	struct fx *f = *state;
	struct dcr_aws_cfg c;

	put_file(f->creds,
		 "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n"
		 "[work]\naws_access_key_id=AKWORK\naws_secret_access_key=swork\n"
		 "aws_session_token = twork\n", 0600);
	put_file(f->conf,
		 "[default]\nregion = eu-west-3\n"
		 "[profile work]\nregion = sa-east-1\ns3 =\n    addressing_style = path\n"
		 "    endpoint_url = http://rgw.local:7480\nca_bundle = /etc/ca.pem\n"
		 "[profile cfgonly]\naws_access_key_id = AKCFG\naws_secret_access_key = scfg\n",
		 0644);
	setenv("AWS_SHARED_CREDENTIALS_FILE", f->creds, 1);
	setenv("AWS_CONFIG_FILE", f->conf, 1);

	assert_int_equal(dcr_aws_cfg_load(NULL, &c), 0);
	assert_string_equal(c.access_key, "AKDEF");
	assert_null(c.session_token);
	assert_string_equal(c.region, "eu-west-3");
	assert_null(c.endpoint);
	dcr_aws_cfg_free(&c);

	setenv("AWS_PROFILE", "work", 1);
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), 0);
	assert_string_equal(c.access_key, "AKWORK");
	assert_string_equal(c.session_token, "twork");
	assert_string_equal(c.region, "sa-east-1");
	assert_string_equal(c.endpoint, "http://rgw.local:7480");
	assert_int_equal(c.path_style, 1);
	assert_string_equal(c.ca_bundle, "/etc/ca.pem");
	dcr_aws_cfg_free(&c);

	/* environment keys beat AWS_PROFILE; an explicit profile beats them */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), 0);
	assert_string_equal(c.access_key, "AKENV");
	dcr_aws_cfg_free(&c);
	struct dcr_store_cfg o = { .profile = "cfgonly", .path_style = -1 };
	assert_int_equal(dcr_aws_cfg_load(&o, &c), 0);
	assert_string_equal(c.access_key, "AKCFG");
	dcr_aws_cfg_free(&c);

	o.profile = "missing";
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -ENOENT);
	o.profile = "bad]name";
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);

	/* no credentials anywhere: an error naming where it looked, never
	 * a silent fallback to unsigned requests ... */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_PROFILE");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	assert_int_equal(dcr_aws_cfg_load(NULL, &c), -EACCES);
	/* ... unless asked for: anonymous */
	struct dcr_store_cfg anon = { .path_style = -1, .no_sign_request = 1 };
	assert_int_equal(dcr_aws_cfg_load(&anon, &c), 0);
	assert_null(c.access_key);
	assert_string_equal(c.region, "us-east-1");
	dcr_aws_cfg_free(&c);
	/* and then even present keys are not used */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	assert_int_equal(dcr_aws_cfg_load(&anon, &c), 0);
	assert_null(c.access_key);
	dcr_aws_cfg_free(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void test_credentials_file(void **state)
{
	struct fx *f = *state;
	struct dcr_aws_cfg c;
	char path[600];
	struct dcr_store_cfg o = { .credentials = path, .path_style = -1 };

	snprintf(path, sizeof(path), "%s/mount-creds", f->dir);
	put_file(path, "[default]\naws_access_key_id = AKFILE\n"
		 "aws_secret_access_key = sfile\n[other]\naws_access_key_id = AKO\n"
		 "aws_secret_access_key = so\n", 0600);
	/* the explicit file beats the environment */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), 0);
	assert_string_equal(c.access_key, "AKFILE");
	assert_string_equal(c.secret_key, "sfile");
	dcr_aws_cfg_free(&c);
	o.profile = "other";
	assert_int_equal(dcr_aws_cfg_load(&o, &c), 0);
	assert_string_equal(c.access_key, "AKO");
	dcr_aws_cfg_free(&c);
	o.profile = "nope";
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -ENOENT);
	o.profile = NULL;

	/* group- or world-accessible files are refused */
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EACCES);
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EACCES);
	assert_int_equal(chmod(path, 0604), 0);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EACCES);
	assert_int_equal(chmod(path, 0400), 0);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), 0);
	dcr_aws_cfg_free(&c);

	/* missing file, directory, key without its secret */
	snprintf(path, sizeof(path), "%s/none", f->dir);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -ENOENT);
	snprintf(path, sizeof(path), "%s", f->dir);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);
	snprintf(path, sizeof(path), "%s/half", f->dir);
	put_file(path, "[default]\naws_access_key_id = AK\n", 0600);
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);
}

/* Every line logged while a test runs, to look for leaked secrets. */
static char logged[8192];

static void log_capture(enum dcr_log_level lvl, const char *msg)
{
	size_t n = strlen(logged);

	(void)lvl;
	snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
}

/* Load with @endpoint: refused, logged once, no userinfo in the log. */
static void refused_quietly(const char *endpoint, const char *shown)
{
	struct dcr_store_cfg o = { .endpoint = endpoint, .path_style = -1 };
	struct dcr_aws_cfg c;

	logged[0] = 0;
	assert_int_equal(dcr_aws_cfg_load(&o, &c), -EINVAL);
	assert_non_null(strstr(logged, "endpoint"));
	if (shown && !strstr(logged, shown))
		fail_msg("'%s' logged as: %s", endpoint, logged);
	if (strstr(logged, "s3cr3t") || strstr(logged, "AKIDLEAK"))
		fail_msg("'%s' leaked into the log: %s", endpoint, logged);
}

static void test_endpoint_userinfo_not_logged(void **state)
{
	(void)state;
	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
	dcr_log_set_sink(log_capture);
	refused_quietly("https://AKIDLEAK:s3cr3t@s3.example.com",
			"'https://***@s3.example.com'");
	refused_quietly("http://AKIDLEAK:s3cr3t@127.0.0.1:9000/",
			"'http://***@127.0.0.1:9000'");
	refused_quietly("https://AKIDLEAK@host", "'https://***@host'");
	/* A password holding '/', '@' or ':' is not echoed in part either. */
	refused_quietly("https://AKIDLEAK:s3/cr@3t@host:443", "***@host:443");
	refused_quietly("https://AKIDLEAK:pa@s3cr3t@host", "***@host");
	/* No scheme, another scheme, a path after the host. */
	refused_quietly("AKIDLEAK:s3cr3t@host", "'***@host'");
	refused_quietly("ftp://AKIDLEAK:s3cr3t@host/p", "'ftp://***@host/p'");
	refused_quietly("https://AKIDLEAK:s3cr3t@host/bucket?x=1",
			"***@host/bucket?x=1");
	/* Without userinfo the endpoint is shown as given, minus controls. */
	refused_quietly("http://host/path", "'http://host/path'");
	refused_quietly("http://ho st\x01", "'http://ho st?'");
	dcr_log_set_sink(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ini, setup, teardown),
		cmocka_unit_test_setup_teardown(test_env, setup, teardown),
		cmocka_unit_test_setup_teardown(test_profiles, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credentials_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_endpoint_userinfo_not_logged,
						setup, teardown),
	};
	dcr_log_set_prog("test_awscfg");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
