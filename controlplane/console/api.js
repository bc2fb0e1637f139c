// api.js: the console's client of airlockd's API, the same API the SDK and the CLI use. The
// session cookie (HttpOnly: this script never sees it) authenticates; every request that can
// change state carries the session's CSRF token, which airlockd checks.

let csrf = null;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && method !== "HEAD" && csrf) headers["X-Airlock-CSRF"] = csrf;
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
    redirect: "error",
  });
  if (r.status === 204) return null;
  let data = null;
  try {
    data = await r.json();
  } catch {
    data = null;
  }
  if (!r.ok) {
    const msg = data && typeof data.message === "string" ? data.message : r.statusText;
    throw new ApiError(r.status, msg);
  }
  return data;
}

// The current session ({keyId, csrfToken, expiresAt}), or null when signed out.
export async function session() {
  try {
    const s = await api("GET", "/console/api/session");
    csrf = s.csrfToken;
    return s;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      csrf = null;
      return null;
    }
    throw e;
  }
}

export async function signIn(apiKey) {
  const s = await api("POST", "/console/api/session", { apiKey });
  csrf = s.csrfToken;
  return s;
}

export async function signOut() {
  try {
    await api("DELETE", "/console/api/session");
  } finally {
    csrf = null;
  }
}

// The session's CSRF token, for what cannot send X-Airlock-CSRF: a WebSocket offers it as
// its subprotocol "csrf.<token>" (the terminal).
export function csrfToken() {
  return csrf;
}
