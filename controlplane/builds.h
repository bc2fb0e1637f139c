/* controlplane/builds: templates made through the E2B API (the SDK's Template.build).
 *
 * Owns: the build API of E2B-PROTOCOL.md as the SDK speaks it: POST /v3/templates (a
 * template and a build of it waiting for its definition), POST
 * /v2/templates/{id}/builds/{buildID} (the definition: fromImage or fromTemplate, steps,
 * startCmd, readyCmd; validated before anything is recorded), GET
 * /templates/{id}/builds/{buildID}/status (status waiting|building|ready|error, the build's
 * log paged by logsOffset, the failing step and reason), GET /templates (E2B's Template
 * objects), GET /templates/{id} (TemplateWithBuilds) and DELETE /templates/{id} (refused
 * while a sandbox uses the template or a build of it runs), GET /templates/{id}/files/{hash}
 * and the upload it grants (a COPY step's tar archive, bounded, kept in <state>/cache/files
 * by its template and filesHash), tags (POST/DELETE /templates/tags, GET /templates/{id}/tags:
 * E2B's NAME:TAG; the default tag is what NAME alone names; a version is kept while a tag names
 * it or a sandbox uses it). Templates and builds live in the state database (store.h); a
 * template's files in <templates>/<id> (templates.h).
 */
#ifndef AIRLOCK_CP_BUILDS_H
#define AIRLOCK_CP_BUILDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;
struct cp_principal;
struct al_http_req;
struct cp_store_build_log_entry;

/* Names the egress policy of a build's RUN steps (POST /v2/templates/{id}/builds/{buildID};
 * the SDK sends it from Template.build's headers option): one the API key may use. */
#define CP_BUILD_POLICY_HEADER "X-Airlock-Build-Policy"

/* Log levels of build log entries (E2B's LogLevel), in increasing order. */
enum cp_build_level { CP_BUILD_DEBUG, CP_BUILD_INFO, CP_BUILD_WARN, CP_BUILD_ERROR };

/* A build log entry as the status answer lists it ({timestamp, level, message, step}). */
json_t *cp_builds_log_entry(const struct cp_store_build_log_entry *e);
/* The level named debug, info, warn or error; -1 for another name. */
int cp_builds_level(const char *name);

/* POST /v3/templates with its parsed body (borrowed). */
void cp_builds_request(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       json_t *body);
/* Whether p is /v2/templates/{id}/builds/{buildID}; the parts (percent-decoded) into tid and
 * bid. */
bool cp_builds_trigger_path(const char *p, char *tid, size_t tlen, char *bid, size_t blen);
/* Checks a build definition (TemplateBuildStartV2, untrusted: a client's) for template tid:
 * exactly one of fromImage (a reference that parses) and fromTemplate (an existing template,
 * not tid), the fields' types and bounds, at most 256 steps of RUN, COPY, ENV, WORKDIR and
 * USER with their arguments. JSON nulls are removed from d. -ENOENT for a fromTemplate that
 * does not exist, -EINVAL otherwise; err names the step. */
int cp_builds_check_definition(struct cp *cp, const char *tid, json_t *d, struct al_error *err);
/* POST /v2/templates/{tid}/builds/{bid} with its parsed body (borrowed). */
void cp_builds_trigger(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *tid, const char *bid, json_t *body);
/* GET /templates, GET and DELETE /templates/{id}, GET /templates/{id}/builds/{bid}/status:
 * true when req was one of them (and is answered). */
bool cp_builds_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* POST /templates/tags {target, tags} (201 {buildID, tags}) and DELETE /templates/tags
 * {name, tags} (204), by req's method, with the parsed body (borrowed). GET
 * /templates/{id}/tags is cp_builds_route's. */
void cp_builds_tags(struct cp *cp, struct al_http_req *req, json_t *body);
/* Removes the versions of template ref ("NAME" or "NAME:TAG") that no tag names and no
 * sandbox uses (a sandbox that goes calls it). */
void cp_builds_gc(struct cp *cp, const char *ref);
/* PUT /templates/{id}/files/{hash}: the upload of a COPY step's archive that GET
 * /templates/{id}/files/{hash} granted; authenticated by that grant, not an API key, so it
 * is routed before authentication. False if req is not such a request. */
bool cp_builds_upload_route(struct cp *cp, struct al_http_req *req);

/* At start: builds that had not ended when airlockd stopped become errors, and the files
 * they were making are removed. */
void cp_builds_recover(struct cp *cp);

#endif
