/* controlplane/sse: see sse.h. */
#include "sse.h"

#include <stdio.h>
#include <string.h>

#include "common/http.h"
#include "common/http_head.h"

bool cp_sse_wanted(const struct al_http_req *req)
{
    const char *a = al_http_req_header(req, "Accept");
    return a && al_http_list_has(a, strlen(a), "text/event-stream", 17);
}

int cp_sse_start(struct al_http_req *req)
{
    struct al_http_header h[] = {{"Content-Type", "text/event-stream"},
                                 {"Cache-Control", "no-store"}};
    int rc = al_http_resp_start(req, 200, h, 2, -1);
    if (rc < 0)
        return rc;
    al_http_resp_write(req, ": ready\n\n", 9);
    return 0;
}

void cp_sse_keepalive(struct al_http_req *req)
{
    al_http_resp_write(req, ": keep-alive\n\n", 14);
}

void cp_sse_end(struct al_http_req *req, const char *why)
{
    char line[512];
    /* One data line: a reason never carries a newline into the stream's framing. */
    int n = snprintf(line, sizeof line, "event: end\ndata: %s", why);
    for (int i = 17; i < n && i < (int)sizeof line; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    size_t len = strlen(line);
    if (len > sizeof line - 3)
        len = sizeof line - 3;
    memcpy(line + len, "\n\n", 3);
    al_http_resp_write(req, line, len + 2);
    al_http_resp_end(req);
}
