// mcp-quota console: a small page over the admin API. A person signs in through the
// identity provider (authorization code with PKCE S256) or pastes a token; the token
// lives in sessionStorage only (never a URL, a cookie or localStorage); every value shown
// is set as text, never as HTML.
"use strict";

const TOKEN_KEY = "mcp-quota-admin-token";
const SIGN_IN_KEY = "mcp-quota-sign-in";  // {refresh, expires}: a signed-in person's token
const PKCE_KEY = "mcp-quota-pkce";  // {state, verifier} while the provider is asked
const BASE = location.pathname.replace(/\/console\/?$/, "");
const main = document.getElementById("main");
let config = null;  // GET /v1/console-config's sign_in, once loaded
let me = null;  // GET /v1/me: who is signed in, their role and permissions

function token() { return sessionStorage.getItem(TOKEN_KEY); }
function may(permission) { return !me || me.permissions.includes(permission); }

function forget() {
  for (const key of [TOKEN_KEY, SIGN_IN_KEY, PKCE_KEY]) sessionStorage.removeItem(key);
  me = null;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const PLAIN = {
  400: "The request was not accepted",
  401: "You are not signed in",
  403: "Your role may not do that",
  404: "Not found",
  409: "That would contradict the current state",
  413: "The request is too large",
  429: "Too many requests; wait a moment",
  503: "The quota store is unavailable; try again shortly",
};

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  await fresh();
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(BASE + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, "The service could not be reached. Check the network and retry.");
  }
  let data = null;
  try { data = await response.json(); } catch (err) { data = null; }
  if (!response.ok) {
    const detail = data && data.error && data.error.message;
    const head = PLAIN[response.status] || `The service answered with an error (${response.status})`;
    if (response.status === 401 || response.status === 403) {
      if (!detail || response.status === 401 || path === "/v1/me") forget();
    }
    throw new ApiError(response.status, detail ? `${head}: ${detail}` : `${head}.`);
  }
  return data;
}

function notice(kind, text) {
  return el("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status", text });
}

function fmt(iso) { return iso ? iso.replace("T", " ").replace("Z", " UTC") : "-"; }

function stateBadge(state) { return el("span", { class: `state ${state}`, text: state }); }

function facts(rows) {
  const dl = el("dl", { class: "facts" });
  for (const [label, value] of rows) {
    if (value === null || value === undefined || value === "") continue;
    dl.append(el("dt", { text: label }), el("dd", {}, value));
  }
  return dl;
}

function table(headers, rows, cls) {
  return el("table", { class: cls || "stack" },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell, i) =>
      el("td", { "data-label": headers[i] }, cell))))));
}

function bar(used, limit) {
  const pct = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : 100;
  const node = el("div", { class: used >= limit ? "bar full" : "bar", role: "img",
    "aria-label": `${used} of ${limit}` }, el("span"));
  node.firstChild.style.width = `${pct}%`;
  return node;
}

// The listing's compact column, as the CLI's: "name version" ("" when neither is known).
function clientName(c) { return c ? [c.name, c.version].filter(Boolean).join(" ") : ""; }

function sessionLink(id) { return el("a", { href: `#/session/${encodeURIComponent(id)}`, text: id }); }
function principalLink(p) {
  return p ? el("a", { href: `#/principal/${encodeURIComponent(p)}`, text: p }) : "-";
}

// replaceChildren() turns null into the text "null": drop the parts a page leaves out.
function show(...nodes) {
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

// -- sign in ---------------------------------------------------------------------------

function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function randomText() { return b64url(crypto.getRandomValues(new Uint8Array(32))); }
function redirectUri() { return location.origin + location.pathname; }

async function loadConfig() {
  if (config !== null) return config;
  try {
    const response = await fetch(`${BASE}/v1/console-config`);
    config = response.ok ? (await response.json()).sign_in || false : false;
  } catch (err) { config = false; }
  return config;
}

// To the identity provider: authorization code flow with PKCE (S256), no client secret.
async function startSignIn() {
  const verifier = randomText();
  const state = randomText();
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  sessionStorage.setItem(PKCE_KEY, JSON.stringify({ state, verifier }));
  const query = new URLSearchParams({
    response_type: "code", client_id: config.client_id, redirect_uri: redirectUri(),
    scope: config.scope, state, code_challenge: b64url(digest), code_challenge_method: "S256",
  });
  location.assign(`${config.authorization_endpoint}?${query}`);
}

async function tokenRequest(form) {
  const response = await fetch(config.token_endpoint, {
    method: "POST", body: new URLSearchParams({ client_id: config.client_id, ...form }),
  });
  if (!response.ok) throw new Error(`The identity provider refused (${response.status}).`);
  const answer = await response.json();
  // The ID token is the bearer: it names the person and their groups for every issuer.
  sessionStorage.setItem(TOKEN_KEY, answer.id_token);
  sessionStorage.setItem(SIGN_IN_KEY, JSON.stringify({
    refresh: answer.refresh_token || form.refresh_token || "",
    expires: Date.now() + (answer.expires_in || 300) * 1000,
  }));
}

// Back from the identity provider with ?code=&state=: the code and the verifier for tokens.
async function finishSignIn(params) {
  const pending = JSON.parse(sessionStorage.getItem(PKCE_KEY) || "null");
  sessionStorage.removeItem(PKCE_KEY);
  history.replaceState(null, "", redirectUri() + location.hash);
  if (params.get("error")) throw new Error(`The identity provider said: ${params.get("error")}.`);
  if (!pending || pending.state !== params.get("state")) throw new Error("That sign-in was not started here; sign in again.");
  await tokenRequest({ grant_type: "authorization_code", code: params.get("code"),
    redirect_uri: redirectUri(), code_verifier: pending.verifier });
}

// A signed-in person's token a minute before it expires: refreshed, else sign in again.
async function fresh() {
  const signedIn = JSON.parse(sessionStorage.getItem(SIGN_IN_KEY) || "null");
  if (!signedIn || signedIn.expires - 60_000 > Date.now()) return;
  try {
    if (!signedIn.refresh) throw new Error("no refresh token");
    await tokenRequest({ grant_type: "refresh_token", refresh_token: signedIn.refresh });
  } catch (err) {
    forget();
    throw new ApiError(401, "Your sign-in has expired: sign in again.");
  }
}

async function whoAmI() {
  me = await api("GET", "/v1/me");
  document.getElementById("who").textContent = `${me.name || me.actor} · ${me.role} · tenant ${me.tenant}`;
}

function tokenForm(primary) {
  const input = el("input", { id: "token", type: "password", autocomplete: "off",
    required: true, "aria-label": "Admin token" });
  const form = el("form", { class: "actions", onsubmit: async (event) => {
    event.preventDefault();
    forget();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await whoAmI();
      route();
    } catch (err) {
      forget();
      signIn(err.message);
    }
  } }, el("label", {}, "Admin token", input),
  el("button", { type: "submit", class: primary ? null : "secondary", text: primary ? "Sign in" : "Sign in with the token" }));
  return { input, form };
}

async function signIn(message) {
  document.getElementById("nav").hidden = true;
  const provider = await loadConfig();
  const paste = tokenForm(!provider);
  const keep = "It is kept in this tab only and forgotten when the tab closes.";
  show(el("section", {},
    el("h1", { text: "Sign in" }),
    message ? notice("error", message) : null,
    provider ? el("div", { class: "buttons" }, el("button", { type: "button", id: "sign-in",
      onclick: () => startSignIn().catch((err) => signIn(err.message)),
      text: "Sign in with your identity provider" })) : null,
    provider ? el("details", {}, el("summary", { text: "Use a token instead (automation)" }),
      el("p", { class: "muted", text: `Paste a viewer, operator or admin token. ${keep}` }), paste.form)
      : el("div", {}, el("p", { class: "muted", text: `Paste an admin token. ${keep}` }), paste.form)));
  if (provider) document.getElementById("sign-in").focus();
  else paste.input.focus();
}

// -- pages -----------------------------------------------------------------------------

async function overview() {
  const since = new Date(Date.now() - 24 * 3600 * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  const data = await api("GET", `/v1/sessions?since=${encodeURIComponent(since)}&limit=100`);
  const sessions = data.sessions;
  const count = (s) => sessions.filter((x) => x.listing_state === s).length;
  const principals = new Set(sessions.map((s) => s.principal || "(none)"));
  // Two servers' incidents must not look alike: group by where and for whom.
  const groups = new Map();
  for (const s of sessions) {
    const key = JSON.stringify([s.server || "(not given)", s.principal || "(none)"]);
    groups.set(key, (groups.get(key) || 0) + 1);
  }
  const rows = sessions.map((s) => [
    sessionLink(s.session_id), stateBadge(s.listing_state), principalLink(s.principal),
    s.server || "-", clientName(s.client) || "-",
    `${s.trouble.kind}${s.trouble.category ? ` (${s.trouble.category})` : ""}`,
    fmt(s.trouble.at), fmt(s.last_call_at),
  ]);
  show(
    el("h1", { text: "Overview: the last 24 hours" }),
    el("section", {},
      el("div", { class: "counts" },
        el("div", {}, el("b", { text: String(count("blocked")) }), "blocked"),
        el("div", {}, el("b", { text: String(count("suspended")) }), "suspended"),
        el("div", {}, el("b", { text: String(count("active")) }), "active again"),
        el("div", {}, el("b", { text: String(count("expired")) }), "expired"),
        el("div", {}, el("b", { text: String(principals.size) }), "principals")),
      sessions.length === 0 ? el("p", { class: "muted", text: "No session was blocked or suspended in the last 24 hours." })
        : table(["Session", "State", "Principal", "Server", "Client", "Event", "When", "Last call"], rows)),
    el("section", {}, el("h2", { text: "By server and principal" }),
      table(["Server", "Principal", "Sessions in trouble"],
        [...groups.entries()].sort((a, b) => b[1] - a[1]).map(([key, n]) => {
          const [server, p] = JSON.parse(key);
          return [server, p === "(none)" ? p : principalLink(p), String(n)];
        }))),
    el("section", {}, el("h2", { text: "Open a session" }),
      el("form", { class: "actions", onsubmit: (event) => {
        event.preventDefault();
        location.hash = `#/session/${encodeURIComponent(event.target.elements.sid.value.trim())}`;
      } }, el("label", {}, "Session id", el("input", { name: "sid", required: true })),
      el("button", { type: "submit", text: "Open" }))),
  );
}

function readOnly(what) {
  return el("section", {}, el("h2", { text: `Act on ${what}` }),
    el("p", { class: "muted", text: `Your role (${me.role}) may only read: an operator or an admin acts.` }));
}

function categoryRows(categories) {
  return Object.entries(categories).map(([name, c]) => [
    name, bar(c.used, c.limit), `${c.used} / ${c.limit}`, String(c.leased ?? "-"),
    c.raised_limit ? `${c.raised_limit}${c.raised_until ? ` until ${fmt(c.raised_until)}` : ""}` : "-",
    refusedText(c),
  ]);
}

// One refused count, the refusals the MCP server held during a hold included and explained.
function refusedText(c) {
  if (c.refused == null) return "-";
  if (!c.refused_held) return String(c.refused);
  return `${c.refused}, ${c.refused_held} of them answered by the MCP server without asking`;
}

// A last call's result, as the CLI words it; a run of refusals says how many were held.
function callResult(c) {
  const held = c.held ? `, ${c.held} of them answered by the MCP server without asking` : "";
  return c.replay ? "replay" : c.allowed ? "allowed" : c.repeats > 1 ? `refused ×${c.repeats} in a row` + held : "refused";
}

function actionForm(id, categories, state, after, chosen) {
  const status = el("div", { "aria-live": "polite" });
  const category = el("select", { name: "category", "aria-label": "Category" },
    Object.keys(categories).map((c) => el("option", { value: c, text: c })));
  // Keep the category the admin last acted on; else preselect the one that is spent:
  // that is the one the admin came to raise.
  const spent = Object.keys(categories).find((c) => categories[c].remaining === 0);
  if (chosen && Object.hasOwn(categories, chosen)) category.value = chosen;
  else if (spent) category.value = spent;
  const mode = el("select", { name: "mode", "aria-label": "Raise mode" },
    el("option", { value: "add", text: "raise by (+N)" }), el("option", { value: "limit", text: "raise to (N)" }));
  const amount = el("input", { name: "amount", type: "number", min: "1", value: "10", "aria-label": "Amount" });
  const expires = el("input", { name: "expires", type: "number", min: "1", placeholder: "never", "aria-label": "Expires in (minutes)" });
  const reason = el("input", { name: "reason", required: true, placeholder: "why", "aria-label": "Reason" });
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  async function act(action, body) {
    if (!reason.value.trim()) { status.replaceChildren(notice("error", "Give a reason: it goes into the audit trail.")); reason.focus(); return; }
    try {
      const result = await api("POST", `${path}/${action}`, { ...body, reason: reason.value.trim() });
      const change = result.before !== undefined ? `: ${result.before} → ${result.after}` : "";
      after(notice("ok", `Done: ${action}${change}.`), category.value);
    } catch (err) {
      // The service's words serve every client; here the way out is a button.
      const advice = err.status === 409 && action === "raise"
        ? " To bring the limit back to the base, use the “Lower to base” button." : "";
      status.replaceChildren(notice("error", err.message + advice));
    }
  }
  const raise = () => {
    const body = { category: category.value, [mode.value]: Number(amount.value) };
    if (expires.value) body.expires_in_seconds = Number(expires.value) * 60;
    return act("raise", body);
  };
  if (!may("act")) return readOnly("this session");
  return el("section", {}, el("h2", { text: "Act on this session" }), status,
    el("form", { class: "actions", onsubmit: (e) => { e.preventDefault(); raise(); } },
      el("label", {}, "Category", category), el("label", {}, "How", mode),
      el("label", {}, "Calls", amount), el("label", {}, "Raise expires in (minutes)", expires),
      el("label", {}, "Reason", reason)),
    el("div", { class: "buttons" },
      el("button", { type: "button", id: "raise", onclick: raise, text: "Raise" }),
      el("button", { type: "button", class: "secondary", onclick: () => act("lower", { category: category.value }), text: "Lower to base" }),
      state === "suspended"
        ? el("button", { type: "button", class: "secondary", onclick: () => act("resume", {}), text: "Resume" })
        : el("button", { type: "button", class: "danger", onclick: () => act("suspend", {}), text: "Suspend" }),
      el("button", { type: "button", class: "secondary", onclick: () => act("reset", {}), text: "Reset counters" })));
}

// The session's trail comes oldest first, the tenant's newest first: shown newest first.
async function auditTable(sessionId, params) {
  const query = new URLSearchParams(params || {});
  if (sessionId) query.set("session_id", sessionId);
  const data = await api("GET", `/v1/audit?${query}`);
  const events = sessionId ? data.events.slice().reverse() : data.events;
  // What changed; else what the event says (a refusal's count, an email's subject).
  const change = (e) => {
    if ([e.before, e.after].some((x) => x)) return `${JSON.stringify(e.before ?? {})} → ${JSON.stringify(e.after ?? {})}`;
    const d = e.detail || {};
    if (d.used !== undefined) return `${d.category} ${d.used}/${d.limit} (${d.scope}), ${d.tool}`;
    if (d.subject) return d.subject;
    if (d.link_action) return `link ${d.link_action}: ${d.subject ?? ""}`;
    return "-";
  };
  const link = (e) => e.detail && e.detail.link_action ? ` (email link: ${e.detail.link_action})` : "";
  const rows = events.map((e) => sessionId
    ? [fmt(e.at), e.type, `${e.actor}${link(e)}`, e.reason || "-", change(e)]
    : [fmt(e.at), e.type, e.session_id ? sessionLink(e.session_id) : "(tenant)",
      principalLink(e.principal), e.server || "-", `${e.actor}${link(e)}`, e.reason || "-", change(e)]);
  const headers = sessionId ? ["When", "Event", "Actor", "Reason", "Change"]
    : ["When", "Event", "Session", "Principal", "Server", "Actor", "Reason", "Change"];
  return { data, node: rows.length ? table(headers, rows, "stack audit")
    : el("p", { class: "muted", text: "No events." }) };
}

// As the CLI and the email word it: "name version, OAuth client id".
function clientText(c) {
  if (!c) return "(not given)";
  return [clientName(c), c.oauth_client_id && `OAuth client ${c.oauth_client_id}`].filter(Boolean).join(", ");
}

async function sessionPage(id, message, chosen) {
  const s = await api("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  const audit = await auditTable(id, { limit: "100" });
  const calls = s.last_calls.slice().reverse().map((c) => [fmt(c.at), c.tool, c.category, callResult(c), c.transport_session_id || "-"]);
  show(
    el("h1", {}, "Session ", el("span", { class: "id", text: id })),
    message || null,
    el("section", {}, facts([
      ["State", stateBadge(s.state)], ["Principal", principalLink(s.principal)],
      ["Server", s.server || "(not given)"], ["Client", clientText(s.client)],
      ["First call", fmt(s.first_call_at)],
      ["Last call", fmt(s.last_call_at)], ["Counters reset", fmt(s.resets_at)],
      ["Suspended because", s.suspended_reason],
    ])),
    el("section", {}, el("h2", { text: "Counters" }),
      table(["Category", "Used", "Used / limit", "Leased", "Raised", "Refused"], categoryRows(s.categories), "stack counters")),
    actionForm(id, s.categories, s.state,
      (note, kept) => sessionPage(id, note, kept).catch(fail), chosen),
    el("section", {}, el("h2", { text: "Last calls" }),
      calls.length ? table(["When", "Tool", "Category", "Result", "Transport session"], calls) : el("p", { class: "muted", text: "None." })),
    el("section", {}, el("h2", { text: "Audit trail" }), audit.node),
  );
}

// A principal's streaks, one per category: "write 4, read 1 (suspended at 6 in one)".
function streaks(b) {
  const parts = Object.entries(b.streaks || {}).map(([name, n]) => `${name} ${n}`);
  return `${parts.length ? parts.join(", ") : "0"} (suspended at ${b.suspend_after_refusals} in one category)`;
}

function budgetPage(title, b, extra) {
  const rows = Object.entries(b.categories).map(([name, c]) => [
    name, bar(c.used, c.limit), `${c.used} / ${c.limit}`, c.raised_limit ? String(c.raised_limit) : "-",
    `${Math.round(c.window_seconds / 3600 * 10) / 10} h`, fmt(c.resets_at),
  ]);
  show(el("h1", { text: title }),
    el("section", {}, facts([["State", stateBadge(b.state)], ["Suspended because", b.suspended_reason],
      ["Refusals in a row", streaks(b)]])),
    el("section", {}, el("h2", { text: "Budgets" }),
      rows.length ? table(["Category", "Used", "Used / limit", "Raised", "Window", "Refills"], rows)
        : el("p", { class: "muted", text: "The policy has no budget at this scope." })),
    extra || null);
}

async function principalPage(p, message) {
  const b = await api("GET", `/v1/principals/${encodeURIComponent(p)}`);
  const status = el("div", { "aria-live": "polite" }, message || null);
  const reason = el("input", { required: true, placeholder: "why", "aria-label": "Reason" });
  const act = async (action) => {
    if (!reason.value.trim()) { status.replaceChildren(notice("error", "Give a reason: it goes into the audit trail.")); return; }
    try {
      await api("POST", `/v1/principals/${encodeURIComponent(p)}/${action}`, { reason: reason.value.trim() });
      principalPage(p, notice("ok", `Done: ${action}.`)).catch(fail);
    } catch (err) { status.replaceChildren(notice("error", err.message)); }
  };
  budgetPage(`Principal ${p}`, b, !may("act") ? readOnly("this principal") : el("section", {}, el("h2", { text: "Act on this principal" }), status,
    el("label", {}, "Reason", reason),
    el("div", { class: "buttons" },
      b.state === "suspended"
        ? el("button", { type: "button", onclick: () => act("resume"), text: "Resume" })
        : el("button", { type: "button", class: "danger", onclick: () => act("suspend"), text: "Suspend" }),
      el("button", { type: "button", class: "secondary", onclick: () => act("reset"), text: "Reset counters" }))));
}

async function tenantPage() { budgetPage("Tenant", await api("GET", "/v1/tenant")); }

async function grantsPage(message) {
  const data = await api("GET", "/v1/grants");
  const status = el("div", { "aria-live": "polite" }, message || null);
  const manage = may("manage");
  const rows = data.grants.map((g) => [g.principal, g.category, String(g.limit), fmt(g.starts_at), fmt(g.ends_at), g.reason || "-",
    !manage ? "" : el("button", { type: "button", class: "secondary", text: "Delete", onclick: async () => {
      try { await api("DELETE", `/v1/grants/${g.grant_id}`); grantsPage(notice("ok", "Grant deleted.")).catch(fail); }
      catch (err) { status.replaceChildren(notice("error", err.message)); }
    } })]);
  const f = (name, attrs) => el("input", { name, required: true, ...attrs });
  const toIso = (v) => new Date(v).toISOString().replace(/\.\d+Z$/, "Z");
  show(el("h1", { text: "Grants" }), status,
    el("section", {}, rows.length ? table(["Principal", "Category", "Limit", "Starts", "Ends", "Reason", ""], rows)
      : el("p", { class: "muted", text: "No grants." })),
    !manage ? null : el("section", {}, el("h2", { text: "New grant" }),
      el("form", { class: "actions", onsubmit: async (event) => {
        event.preventDefault();
        const e = event.target.elements;
        try {
          await api("POST", "/v1/grants", { principal: e.principal.value.trim(), category: e.category.value.trim(),
            limit: Number(e.limit.value), starts_at: toIso(e.starts.value), ends_at: toIso(e.ends.value), reason: e.reason.value.trim() });
          grantsPage(notice("ok", "Grant created.")).catch(fail);
        } catch (err) { status.replaceChildren(notice("error", err.message)); }
      } },
      el("label", {}, "Principal", f("principal")), el("label", {}, "Category", f("category", { value: "write" })),
      el("label", {}, "Limit", f("limit", { type: "number", min: "1" })),
      el("label", {}, "Starts", f("starts", { type: "datetime-local" })), el("label", {}, "Ends", f("ends", { type: "datetime-local" })),
      el("label", {}, "Reason", f("reason")), el("button", { type: "submit", text: "Create grant" }))));
}

// Approvals of single calls (issue 32): pending first; approving or denying needs "act".
async function approvalsPage(params, focus, message) {
  const state = params.get("state") || "pending";
  const data = await api("GET", `/v1/approvals?state=${encodeURIComponent(state)}`);
  const status = el("div", { "aria-live": "polite" }, message || null);
  const act = may("act");
  const decide = (a, verb, reason) => async () => {
    try {
      await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/${verb}`, reason.value.trim() ? { reason: reason.value.trim() } : {});
      approvalsPage(params, null, notice("ok", verb === "approve" ? "Approved: the call may run once." : "Denied.")).catch(fail);
    } catch (err) { status.replaceChildren(notice("error", err.message)); }
  };
  const rows = data.approvals.map((a) => {
    const reason = el("input", { name: "reason", placeholder: "reason (optional)", "aria-label": `reason for ${a.id}` });
    const buttons = !act || a.state !== "pending" ? "" : el("span", {}, reason,
      el("button", { type: "button", text: "Approve", onclick: decide(a, "approve", reason) }),
      el("button", { type: "button", class: "secondary", text: "Deny", onclick: decide(a, "deny", reason) }));
    return [el("code", { text: a.id, class: a.id === focus ? "focus" : null }), a.tool, el("code", { text: a.arguments_preview || "-" }),
      principalLink(a.principal), a.session_id ? sessionLink(a.session_id) : "-", a.server || "-", stateBadge(a.state), fmt(a.expires_at), buttons];
  });
  const states = ["pending", "approved", "denied", "used", "expired"].map((s) =>
    el("a", { href: `#/approvals?state=${s}`, text: s, "aria-current": s === state ? "page" : null }));
  show(el("h1", { text: "Approvals" }), el("nav", { class: "filters" }, states), status,
    el("section", {}, rows.length ? table(["Approval", "Tool", "Arguments", "Principal", "Session", "Server", "State", "Expires", ""], rows)
      : el("p", { class: "muted", text: `No ${state} approvals.` })));
}

const EVENT_TYPES = ["quota_exceeded", "notification_sent", "notification_failed",
  "session_raised", "session_lowered", "session_suspended", "session_resumed", "session_reset",
  "principal_raised", "principal_suspended", "principal_resumed", "principal_reset",
  "grant_created", "grant_deleted", "token_created", "token_revoked", "link_declined",
  "shadow_refusal", "repeated_call", "approval_requested", "approval_granted",
  "approval_denied", "approval_used", "approval_expired"];
const AUDIT_FILTERS = ["type", "principal", "server", "since", "until"];

// By default: every event of the tenant, newest first; a session id shows its own trail.
async function auditPage(params) {
  const sessionId = params.get("session_id") || "";
  const query = { limit: params.get("limit") || "50" };
  for (const name of sessionId ? ["since"] : AUDIT_FILTERS) {
    if (params.get(name)) query[name] = params.get(name);
  }
  if (params.get("next")) query.next = params.get("next");
  const { data, node } = await auditTable(sessionId || null, query);
  const go = (extra) => {
    const next = new URLSearchParams({ ...(sessionId ? { session_id: sessionId } : {}), ...query, ...extra });
    location.hash = `#/audit?${next}`;
  };
  const iso = (v) => new Date(v).toISOString().replace(/\.\d+Z$/, "Z");
  const type = el("select", { name: "type", "aria-label": "Event type" },
    el("option", { value: "", text: "every type" }),
    EVENT_TYPES.map((t) => el("option", { value: t, text: t })));
  type.value = query.type || "";
  const filters = [
    query.type, query.principal && `principal ${query.principal}`, query.server && `server ${query.server}`,
  ].filter(Boolean);
  const title = sessionId ? `Audit: session ${sessionId}`
    : `Audit: every event of the tenant${filters.length ? ` (${filters.join(", ")})` : ""}`;
  show(el("h1", { text: title }),
    el("section", {}, el("form", { class: "actions", onsubmit: (event) => {
      event.preventDefault();
      const e = event.target.elements;
      const next = new URLSearchParams();
      if (e.sid.value.trim()) next.set("session_id", e.sid.value.trim());
      else {
        for (const name of ["type", "principal", "server"]) {
          if (e[name].value.trim()) next.set(name, e[name].value.trim());
        }
      }
      if (e.since.value) next.set("since", iso(e.since.value));
      location.hash = `#/audit?${next}`;
    } }, el("label", {}, "Session id (empty: the whole tenant)", el("input", { name: "sid", value: sessionId })),
      el("label", {}, "Type", type),
      el("label", {}, "Principal", el("input", { name: "principal", value: query.principal || "" })),
      el("label", {}, "Server", el("input", { name: "server", value: query.server || "" })),
      el("label", {}, "Since", el("input", { name: "since", type: "datetime-local" })),
      el("button", { type: "submit", text: "Filter" }))),
    el("section", {}, node, data.next ? el("div", { class: "buttons" },
      el("button", { type: "button", class: "secondary", text: "Next page", onclick: () => go({ next: data.next }) })) : null));
}

// Shadow mode: what an enforcing policy would have refused, from GET /v1/shadow.
async function shadowPage(params) {
  const since = params.get("since");
  const data = await api("GET", `/v1/shadow${since ? `?${new URLSearchParams({ since })}` : ""}`);
  const rows = data.groups.map((g) => [g.server, principalLink(g.principal === "-" ? "" : g.principal), g.tool,
    String(g.refusals), String(g.sessions), g.categories.join(", "), g.scopes.join(", "), fmt(g.last)]);
  show(el("h1", { text: "Would have refused (shadow mode)" }),
    el("p", { class: "muted", text: "Calls a policy with \"enforce\": false let run past a limit, by server, principal and tool." }),
    el("section", {}, el("form", { class: "actions", onsubmit: (event) => {
      event.preventDefault();
      const value = event.target.elements.since.value;
      const next = new URLSearchParams(value ? { since: new Date(value).toISOString().replace(/\.\d+Z$/, "Z") } : {});
      location.hash = `#/shadow?${next}`;
    } }, el("label", {}, "Since", el("input", { name: "since", type: "datetime-local" })),
      el("button", { type: "submit", text: "Filter" }))),
    data.truncated ? notice("error", "Only the first 10,000 events were read: choose a later time.") : null,
    el("section", {}, rows.length
      ? table(["Server", "Principal", "Tool", "Would refuse", "Sessions", "Category", "Scope", "Last"], rows)
      : el("p", { class: "muted", text: "No call would have been refused." })));
}

// -- routing ---------------------------------------------------------------------------

function fail(err) {
  if (err instanceof ApiError && (err.status === 401 || (err.status === 403 && !token()))) { signIn(err.message); return; }
  main.replaceChildren(notice("error", err.message || "Something went wrong."));
}

function route() {
  if (!token()) { signIn(); return; }
  if (!me) { whoAmI().then(route, fail); return; }
  document.getElementById("nav").hidden = false;
  const [path, search] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(search || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  show(el("p", { class: "muted", text: "Loading…" }));
  let page;
  if (parts[0] === "session" && parts[1]) page = sessionPage(parts[1]);
  else if (parts[0] === "principal" && parts[1]) page = principalPage(parts[1]);
  else if (parts[0] === "tenant") page = tenantPage();
  else if (parts[0] === "grants") page = grantsPage();
  else if (parts[0] === "approvals") page = approvalsPage(params, parts[1]);
  else if (parts[0] === "audit") page = auditPage(params);
  else if (parts[0] === "shadow") page = shadowPage(params);
  else page = overview();
  page.catch(fail);
}

document.getElementById("signout").addEventListener("click", () => {
  forget();
  document.getElementById("who").textContent = "";
  signIn();
});
window.addEventListener("hashchange", route);
const returned = new URLSearchParams(location.search);
if (returned.has("code") || returned.has("error")) {
  loadConfig().then(() => finishSignIn(returned)).then(route, (err) => { forget(); signIn(err.message); });
} else {
  route();
}
