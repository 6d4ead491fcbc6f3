// Beacon console: a small script over Beacon's own REST API (no framework, nothing fetched from elsewhere).
// The session is an HttpOnly cookie this script never sees; every request carries the session's CSRF token.
"use strict";

const console_ = {
  session: null, // { org, app, csrf_token, expires_at }
};

/** An error answer of the API: its HTTP status, stable code and description. */
class ApiError extends Error {
  constructor(status, code, description) {
    super(description || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** Calls `path`: absolute when it starts with /console/, else under /{org}/{app}/. */
async function call(method, path, body) {
  const session = console_.session;
  const url = path.startsWith("/console/") ? path : `/${encodeURIComponent(session.org)}/${encodeURIComponent(session.app)}/${path}`;
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (session) headers["X-CSRF-Token"] = session.csrf_token;
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!response.ok) {
    const error = new ApiError(response.status, json && json.error, json && json.error_description);
    // Back to the sign-in form (once, however many requests were under way) when the session is gone: ended or expired
    // (401), or replaced by signing in again in another tab, which leaves this tab's CSRF token stale (403).
    if (console_.session && response.status === 401 && !path.startsWith("/console/session")) showSignIn("Your session ended; sign in again.");
    else if (console_.session && isStaleCsrf(error)) showSignIn("This tab's session was replaced (signed in again in another tab?); sign in again.");
    throw error;
  }
  return json;
}

/**
 * Whether the server refused the request's CSRF token: `forbidden_op` is also the answer to other refusals (a sender
 * who is not in the group, …), so the description tells them apart (Console.checkCSRF in Console.swift).
 */
function isStaleCsrf(error) {
  return error.status === 403 && error.code === "forbidden_op" && /X-CSRF-Token/.test(error.message);
}

/** Makes an element: attributes (`on…` are listeners) and children (strings become text, never HTML). */
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Shows a page: its heading and its content (null, undefined and false are left out, as `el` does). */
function show(title, ...content) {
  const main = document.getElementById("main");
  main.replaceChildren(el("h1", {}, title), ...content.flat().filter((child) => child !== null && child !== undefined && child !== false));
  document.title = `${title} · Beacon console`;
}

/** An error that belongs to no page (a failed sign-out), above the page; empty clears it. */
function showGlobalError(message) {
  document.getElementById("global-error").textContent = message || "";
}

function time(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

/**
 * `ms` as a date and time in the first of `zones` (IANA names) this browser knows, named; UTC when it knows none of
 * them (a zone Beacon's server accepts may be unknown to an older browser).
 */
function zonedTime(ms, ...zones) {
  for (const timeZone of [...zones.filter(Boolean), "UTC"]) {
    try {
      const text = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
        timeZone, timeZoneName: "short" }).format(new Date(ms));
      return timeZone === "UTC" ? text : `${text} (${timeZone})`;
    } catch (_) { /* RangeError: a zone this browser does not know; try the next one */ }
  }
  return time(ms);
}

/** A labelled input with a place for its error (announced to screen readers). */
function field(label, id, input, hint) {
  input.id = id;
  input.name = id;
  const error = el("p", { class: "field-error", id: `${id}-error`, role: "alert" });
  input.setAttribute("aria-describedby", `${id}-error${hint ? ` ${id}-hint` : ""}`);
  return el("div", { class: "field" }, el("label", { for: id }, label), hint ? el("p", { class: "hint", id: `${id}-hint` }, hint) : null, input, error);
}

function setFieldError(form, id, message) {
  const target = form.querySelector(`#${id}-error`);
  if (target) target.textContent = message;
  const input = form.querySelector(`#${id}`);
  if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
}

function clearErrors(form) {
  form.querySelectorAll(".field-error, .form-error").forEach((node) => { node.textContent = ""; });
  form.querySelectorAll("[aria-invalid]").forEach((node) => node.setAttribute("aria-invalid", "false"));
}

// MARK: Signing in and out

function showSignIn(message) {
  console_.session = null;
  showGlobalError("");
  document.getElementById("nav").hidden = true;
  document.getElementById("app-name").textContent = "";
  const form = el("form", { class: "card", id: "sign-in", novalidate: true },
    message ? el("p", { class: "form-error", role: "alert" }, message) : null,
    el("p", { class: "hint" }, "Sign in with the app's client credentials (what `beacon app create` printed)."),
    field("Organization", "org", el("input", { type: "text", autocomplete: "organization", required: true })),
    field("App", "app", el("input", { type: "text", required: true })),
    field("Client id", "client_id", el("input", { type: "text", autocomplete: "username", required: true })),
    field("Client secret", "client_secret", el("input", { type: "password", autocomplete: "off", required: true })),
    el("p", { class: "form-error", id: "sign-in-error", role: "alert" }),
    el("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const values = Object.fromEntries(["org", "app", "client_id", "client_secret"].map((name) => [name, form.elements[name].value.trim()]));
    try {
      console_.session = await call("POST", "/console/session", values);
      signedIn();
    } catch (error) {
      form.querySelector("#sign-in-error").textContent = error.message;
    }
  });
  show("Sign in", form);
  form.elements.org.focus();
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  document.getElementById("app-name").textContent = `${console_.session.org}/${console_.session.app}`;
  if (!location.hash || location.hash === "#/") location.hash = "#/overview";
  else route();
}

async function signOut() {
  showGlobalError("");
  try {
    await call("DELETE", "/console/session");
  } catch (error) {
    // Already back on the sign-in form when this tab's token was stale; said there.
    if (!console_.session) return;
    if (error.status === 401) {
      location.hash = "";
      showSignIn("Your session had already ended; sign in again.");
    } else {
      showGlobalError(`Sign-out failed, you are still signed in: ${error.message}`);
    }
    return;
  }
  location.hash = "";
  showSignIn("Signed out.");
}

// MARK: Overview

async function overviewPage() {
  const stats = (await call("GET", "stats")).data;
  const figure = (label, value, id) => el("div", { class: "figure", id }, el("span", { class: "figure-value" }, String(value)), el("span", { class: "figure-label" }, label));
  const outcomes = (window) => {
    if (!window.pushes.length) return el("p", {}, "No push.");
    const records = (p) => `#/deliveries?${new URLSearchParams({ status: p.status, reason: p.reason, since: String(window.since) })}`;
    return el("table", {},
      el("thead", {}, el("tr", {}, ["Outcome", "Reason", "Pushes"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, window.pushes.map((p) => el("tr", {},
        el("td", { class: `status-${p.status}` }, p.status),
        el("td", {}, p.reason ? el("a", { href: records(p) }, p.reason) : ""),
        el("td", {}, String(p.count))))));
  };
  const expiring = stats.expiring_certificates.length
    ? el("section", { class: "card", role: "alert" }, el("h2", { class: "expiring" }, "Certificates expiring within 30 days"),
      el("ul", {}, stats.expiring_certificates.map((c) => el("li", {}, `${c.name}: ${new Date(c.expires_at).toLocaleDateString()}`))))
    : null;
  show("Overview",
    expiring,
    el("section", { class: "card figures", id: "overview-figures" },
      figure("users", stats.users, "figure-users"), figure("devices online now", stats.devices_online, "figure-online"),
      figure("messages in the last hour", stats.last_hour.messages, "figure-messages-hour"),
      figure("messages in the last day", stats.last_day.messages, "figure-messages-day")),
    el("section", { class: "card", id: "pushes-hour" }, el("h2", {}, "Pushes in the last hour"), outcomes(stats.last_hour)),
    el("section", { class: "card", id: "pushes-day" }, el("h2", {}, "Pushes in the last day"), outcomes(stats.last_day)),
    credentialsCard());
}

/**
 * The app's client credentials: rotating the secret (after a confirmation) ends everything the old one opened, this
 * session included, so the page goes to the sign-in form with the new secret shown above it, once.
 */
function credentialsCard() {
  const error = el("p", { class: "form-error", id: "rotate-error", role: "alert" });
  const rotate = el("button", { type: "button", class: "secondary", id: "rotate-secret" }, "Rotate client secret");
  rotate.addEventListener("click", async () => {
    const app = `${console_.session.org}/${console_.session.app}`;
    const current = window.prompt(`Rotate the client secret of ${app}? The current secret stops working at once: every app token issued `
      + "with it and every console session of the app, this one too, end. The new secret is shown once. To confirm, enter the "
      + "current client secret:");
    if (!current) return;
    error.textContent = "";
    rotate.disabled = true;
    let answer;
    try {
      answer = await call("POST", "credentials/rotate", { client_secret: current });
    } catch (failure) {
      rotate.disabled = false;
      if (console_.session) error.textContent = `The secret was not rotated: ${failure.message}`;
      return;
    }
    showRotatedSecret(answer.data);
  });
  const identity = el("p", { id: "app-identity" });
  call("GET", "credentials").then((answer) => {
    const data = answer.data;
    identity.append("Client id: ", el("code", { class: "mono", id: "client-id" }, data.client_id));
    if (data.sdkappid !== undefined) {
      identity.append(el("br"), "Tencent SDKAppID: ", el("code", { class: "mono", id: "sdkappid" }, String(data.sdkappid)),
        ` (administrator ${data.tencent_admin})`);
    }
  }).catch((failure) => { if (console_.session) error.textContent = `The app's identifiers could not be read: ${failure.message}`; });
  return el("section", { class: "card", id: "credentials" }, el("h2", {}, "Client credentials"), identity,
    el("p", { class: "hint" }, "A leaked client secret? Rotate it: the old one obtains nothing more, and its app tokens and console "
      + "sessions end (on other servers of a cluster within 5 seconds). The client id stays; user tokens stay. The Tencent "
      + "secret key is rotated with it (the SDKAppID stays)."),
    rotate, error);
}

/** After a rotation: the sign-in form, with the new credentials above it (shown only here) and all but the secret filled in. */
function showRotatedSecret(credentials) {
  location.hash = "";
  showSignIn("The client secret was rotated: every app token and console session of the app has ended, this one too.");
  const form = document.getElementById("sign-in");
  const card = el("section", { class: "card", id: "new-secret", role: "status" },
    el("h2", {}, "New client secret"),
    el("p", {}, "Copy it now: it is shown only this once (Beacon keeps only its hash). Then sign in with it."),
    el("p", {}, "Client id: ", el("code", { class: "mono", id: "new-client-id" }, credentials.client_id)),
    el("p", {}, "Client secret: ", el("code", { class: "mono", id: "new-client-secret" }, credentials.client_secret)),
    credentials.sdk_secret_key === undefined ? null
      : el("p", {}, `Tencent secret key (SDKAppID ${credentials.sdkappid}): `,
        el("code", { class: "mono", id: "new-sdk-secret-key" }, credentials.sdk_secret_key)));
  form.before(card);
  form.elements.org.value = credentials.org;
  form.elements.app.value = credentials.app;
  form.elements.client_id.value = credentials.client_id;
  form.elements.client_secret.focus();
}

// MARK: Push certificates

const certificateErrorFields = {
  invalid_p12_password: "password",
  invalid_p12_file: "file",
  invalid_p8_key: "file",
  certificate_expired: "file",
  duplicate_unique_property_exists: "name",
};

async function certificatesPage() {
  const list = el("div", { class: "table-wrap", id: "certificate-list" }, "Loading…");
  const listError = el("p", { class: "form-error", id: "certificate-list-error", role: "alert" });
  const form = uploadForm(() => loadCertificates(list, listError));
  show("Push certificates", el("section", { class: "card" }, el("h2", {}, "Uploaded"), listError, list), el("h2", {}, "Send a test push"),
    testPushForm(), el("h2", {}, "Upload"), form);
  await loadCertificates(list, listError);
}

/**
 * Sends a test push to a user's bound devices (or to the device bound with a token) and shows APNs' answer for each, as
 * the delivery record gets it.
 */
function testPushForm() {
  const result = el("div", { id: "test-push-result", role: "status", "aria-live": "polite" });
  const form = el("form", { class: "card", id: "test-push", novalidate: true },
    field("Username", "test_username", el("input", { type: "text" })),
    field("Device id", "test_device", el("input", { type: "text" }), "Optional: one of the user's devices (all of them when empty)."),
    field("or Device token", "test_token", el("input", { type: "text", class: "mono", spellcheck: "false" }),
      "The hex APNs token of a bound device, instead of a username: whoever holds it now gets the push."),
    el("p", { class: "form-error", id: "test-push-error", role: "alert" }),
    result,
    el("button", { type: "submit" }, "Send test push"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    result.replaceChildren();
    const [username, token, device] = ["test_username", "test_token", "test_device"].map((name) => form.elements[name].value.trim());
    if (username && token) { setFieldError(form, "test_token", "A username or a device token, not both."); return; }
    if (!username && !token) { setFieldError(form, "test_username", "Which user (or device token)?"); return; }
    const body = username ? { username } : { device_token: token };
    if (device) body.device_id = device;
    let answer;
    try {
      answer = (await call("POST", "push/test", body)).data;
    } catch (error) {
      if (/device_token/.test(error.message)) setFieldError(form, "test_token", error.message);
      else form.querySelector("#test-push-error").textContent = error.message;
      return;
    }
    result.replaceChildren(el("p", {}, `Sent to ${answer.username} as message ${answer.message_id}; waiting for APNs…`));
    let records = [];
    try {
      for (let wait = 0; wait < 30; wait++) {
        records = (await call("GET", `push/deliveries?message_id=${encodeURIComponent(answer.message_id)}`)).entities;
        if (records.length && records.every((r) => r.status !== "pending")) break;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    } catch (error) {
      form.querySelector("#test-push-error").textContent = `Sent, but its delivery record could not be read: ${error.message}`;
      return;
    }
    result.replaceChildren(el("p", {}, `APNs' answer for ${answer.username}'s devices:`),
      el("div", { class: "table-wrap" }, el("table", { class: "test-push-answers" },
      el("thead", {}, el("tr", {}, ["Device", "Certificate", "Status", "APNs status", "Reason", "apns-id"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, records.map((r) => el("tr", {},
        el("td", { class: "mono" }, r.device_id), el("td", {}, r.notifier_name), el("td", { class: `status-${r.status}` }, r.status),
        el("td", {}, r.http_status ? String(r.http_status) : ""), el("td", {}, r.reason || ""), el("td", { class: "mono" }, r.apns_id)))))),
      el("p", {}, el("a", { href: `#/deliveries?message_id=${encodeURIComponent(answer.message_id)}` }, "See it in Deliveries")));
  });
  return form;
}

/** Lists the certificates in `list`; a failed deletion is said in `listError`. */
async function loadCertificates(list, listError) {
  const answer = await call("GET", "push/certificates");
  const soon = Date.now() + 30 * 24 * 3600 * 1000;
  if (!answer.entities.length) {
    list.replaceChildren(el("p", {}, "No push certificate yet: upload a .p8 key or a .p12 certificate below."));
    return;
  }
  const rows = answer.entities.map((c) => {
    const expires = c.expires ? Date.parse(c.expires) : null;
    const remove = el("button", { type: "button", class: "danger", "aria-label": `Delete ${c.name}` }, "Delete");
    remove.addEventListener("click", async () => {
      if (!window.confirm(`Delete push certificate ${c.name}? Devices bound to it stop receiving pushes.`)) return;
      listError.textContent = "";
      try {
        await call("DELETE", `push/certificates/${encodeURIComponent(c.name)}`);
        await loadCertificates(list, listError);
      } catch (error) {
        listError.textContent = `Could not delete ${c.name}: ${error.message}`;
      }
    });
    return el("tr", { "data-name": c.name },
      el("td", {}, c.name), el("td", {}, c.kind), el("td", {}, c.environment), el("td", { class: "mono" }, c.bundle_id),
      el("td", {}, c.voip ? "yes" : "no"),
      el("td", { class: "mono" }, c.key_id ? `${c.key_id} / ${c.team_id}` : ""),
      el("td", { class: expires !== null && expires < soon ? "expiring" : null },
        expires === null ? "never (token key)" : `${new Date(expires).toLocaleDateString()}${expires < soon ? " — expires within 30 days" : ""}`),
      el("td", {}, time(c.created)), el("td", {}, remove));
  });
  list.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ["Name", "Kind", "Environment", "Bundle id", "VoIP", "Key id / team id", "Expires", "Uploaded", ""].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows)));
}

function uploadForm(onUploaded) {
  const kind = el("select", {}, el("option", { value: "p8" }, ".p8 token key"), el("option", { value: "p12" }, ".p12 certificate"));
  const environment = el("select", {}, el("option", { value: "development" }, "development"), el("option", { value: "production" }, "production"));
  const p8Fields = el("div", {},
    field("Key id", "key_id", el("input", { type: "text", maxlength: 10 }), "10 characters, from Apple's developer account."),
    field("Team id", "team_id", el("input", { type: "text", maxlength: 10 })));
  const p12Fields = el("div", { hidden: true }, field("Certificate password", "password", el("input", { type: "password", autocomplete: "off" })));
  const form = el("form", { class: "card", id: "upload", novalidate: true },
    field("Name", "name", el("input", { type: "text", required: true }), "The name the app passes as apnsCertName (letters, digits, _ - .)."),
    field("Kind", "kind", kind),
    field("Environment", "environment", environment),
    field("Bundle id", "bundle_id", el("input", { type: "text", required: true })),
    el("label", {}, el("input", { type: "checkbox", id: "voip", name: "voip" }), " Also for VoIP pushes"),
    field("File", "file", el("input", { type: "file", accept: ".p8,.p12,.pem", required: true })),
    p8Fields, p12Fields,
    el("p", { class: "form-error", id: "upload-error", role: "alert" }),
    el("p", { class: "notice", id: "upload-notice", role: "status" }),
    el("button", { type: "submit" }, "Upload"));
  kind.addEventListener("change", () => {
    p8Fields.hidden = kind.value !== "p8";
    p12Fields.hidden = kind.value !== "p12";
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    form.querySelector("#upload-notice").textContent = "";
    const file = form.elements.file.files[0];
    if (!file) { setFieldError(form, "file", "Choose the .p8 or .p12 file."); return; }
    const bytes = new Uint8Array(await file.arrayBuffer());
    const body = {
      name: form.elements.name.value.trim(), kind: kind.value, environment: environment.value,
      bundle_id: form.elements.bundle_id.value.trim(), voip: form.elements.voip.checked,
      file: kind.value === "p8" ? new TextDecoder().decode(bytes) : base64(bytes),
    };
    if (kind.value === "p8") { body.key_id = form.elements.key_id.value.trim(); body.team_id = form.elements.team_id.value.trim(); }
    else body.password = form.elements.password.value;
    try {
      await call("POST", "push/certificates", body);
      form.reset();
      p8Fields.hidden = false;
      p12Fields.hidden = true;
      form.querySelector("#upload-notice").textContent = `Uploaded ${body.name}.`;
      await onUploaded();
    } catch (error) {
      const target = certificateErrorFields[error.code] || fieldNamedIn(error.message);
      if (target) setFieldError(form, target, error.message);
      else form.querySelector("#upload-error").textContent = error.message;
    }
  });
  return form;
}

/** Base64 of any size (a spread of every byte into one call fails for large files). */
function base64(bytes) {
  let text = "";
  for (let start = 0; start < bytes.length; start += 0x8000) text += String.fromCharCode(...bytes.subarray(start, start + 0x8000));
  return btoa(text);
}

/** The upload field an `illegal_argument` description is about, from the field name it starts with. */
function fieldNamedIn(message) {
  const match = /^(name|bundle_id|key_id|team_id|password|file|environment|kind)\b/.exec(message || "");
  return match ? match[1] : null;
}

// MARK: Deliveries

async function deliveriesPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const form = el("form", { class: "card filters", id: "delivery-filters", role: "search" },
    field("Username", "username", el("input", { type: "search", value: params.get("username") || "" })),
    field("Message id", "message_id", el("input", { type: "search", inputmode: "numeric", value: params.get("message_id") || "" })),
    field("Status", "status", el("select", {}, ["", "sent", "failed", "skipped", "expired", "pending"].map((s) =>
      el("option", { value: s, selected: params.get("status") === s }, s || "any")))),
    field("Reason", "reason", el("input", { type: "search", value: params.get("reason") || "" })),
    params.get("since") ? el("p", { class: "hint", id: "delivery-since" }, `Updated since ${time(Number(params.get("since")))}.`) : null,
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const name of ["username", "message_id", "status", "reason"]) {
      const value = form.elements[name].value.trim();
      if (value) query.set(name, value);
    }
    const next = `#/deliveries?${query}`;
    // The same filter again reads the records again: setting the hash it already has would change nothing.
    if (location.hash === next) route(); else location.hash = next;
  });
  const results = el("div", { class: "table-wrap", id: "delivery-list" }, "Loading…");
  show("Deliveries", form, results);
  // The server filters; the newest 200 matching records are shown.
  const query = new URLSearchParams({ limit: "200" });
  for (const name of ["username", "message_id", "status", "reason", "since"]) if (params.get(name)) query.set(name, params.get(name));
  let records;
  try {
    records = (await call("GET", `push/deliveries?${query}`)).entities;
  } catch (error) {
    results.replaceChildren(el("p", { class: "form-error", role: "alert" }, error.message));
    return;
  }
  if (!records.length) {
    results.replaceChildren(el("p", {}, "No push record matches."));
    return;
  }
  results.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ["Message", "User", "Device", "Certificate", "Type", "Status", "Reason", "APNs", "Attempts", "Updated", "Payload"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, records.map((r) => el("tr", {},
      el("td", { class: "mono" }, el("a", { href: `#/deliveries?message_id=${encodeURIComponent(r.message_id)}` }, r.message_id)),
      el("td", {}, el("a", { href: `#/deliveries?username=${encodeURIComponent(r.username)}` }, r.username)),
      el("td", { class: "mono" }, r.device_id), el("td", {}, r.notifier_name), el("td", {}, r.push_type),
      el("td", { class: `status-${r.status}` }, r.status), el("td", {}, r.reason || ""),
      el("td", { class: "mono" }, [r.http_status ? String(r.http_status) : "", r.apns_id].filter(Boolean).join(" · ")),
      el("td", {}, attempts(r)), el("td", {}, time(r.updated)),
      el("td", {}, r.payload ? el("details", {}, el("summary", {}, "JSON"), el("pre", {}, JSON.stringify(r.payload, null, 2))) : ""))))));
}

/**
 * A record's APNs attempts (`history`), oldest first, folded under their count: when, the outcome, APNs' HTTP status
 * and reason, with the record's apns-id (each attempt is sent with it).
 */
function attempts(record) {
  const history = record.history || [];
  if (!history.length) return "none";
  return el("details", { class: "attempts" },
    el("summary", {}, `${history.length} attempt${history.length === 1 ? "" : "s"}`),
    el("ol", {}, history.map((a) => el("li", {},
      el("span", {}, time(a.at)), " ", el("span", { class: `status-${a.outcome}` }, a.outcome),
      a.http_status ? ` · HTTP ${a.http_status}` : "", a.reason ? ` · ${a.reason}` : "",
      record.apns_id ? el("span", { class: "mono apns-id" }, ` · apns-id ${record.apns_id}`) : null))));
}

// MARK: Users

async function usersPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const form = el("form", { class: "card filters", id: "user-search", role: "search" },
    field("Username starts with", "prefix", el("input", { type: "search", value: params.get("prefix") || "" })),
    el("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const prefix = form.elements.prefix.value.trim();
    location.hash = prefix ? `#/users?prefix=${encodeURIComponent(prefix)}` : "#/users";
  });
  const list = el("div", { class: "table-wrap", id: "user-list" }, "Loading…");
  show("Users", form, list);
  const query = new URLSearchParams({ limit: "50" });
  for (const name of ["prefix", "cursor"]) if (params.get(name)) query.set(name, params.get(name));
  const answer = await call("GET", `users?${query}`);
  if (!answer.entities.length) { list.replaceChildren(el("p", {}, "No user matches.")); return; }
  const next = new URLSearchParams(params);
  if (answer.cursor) next.set("cursor", answer.cursor);
  list.replaceChildren(
    el("table", {},
      el("thead", {}, el("tr", {}, ["Username", "Nickname", "Time zone", "Created"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, answer.entities.map((u) => el("tr", {},
        el("td", {}, el("a", { href: `#/user?name=${encodeURIComponent(u.username)}` }, u.username)),
        el("td", {}, u.nickname || ""), el("td", {}, u.timezone || ""), el("td", {}, time(u.created)))))),
    answer.cursor ? el("p", {}, el("a", { href: `#/users?${next}` }, "Next page")) : null);
}

async function userPage() {
  const name = new URLSearchParams(location.hash.split("?")[1] || "").get("name") || "";
  const path = `users/${encodeURIComponent(name)}`;
  const [user, settings, language, chosen, templates, policy] = await Promise.all([
    call("GET", path), call("GET", `${path}/notification/user/${encodeURIComponent(name)}`), call("GET", `${path}/notification/language`),
    call("GET", `${path}/notification/template`), call("GET", "notification/template"), call("GET", "push/policy")]);
  const entity = user.entities[0];
  const devices = el("div", { class: "table-wrap", id: "device-list" });
  const devicesError = el("p", { class: "form-error", id: "device-error", role: "alert" });
  await renderDevices(devices, path, devicesError);
  show(`User ${name}`,
    el("p", {}, el("a", { href: `#/deliveries?username=${encodeURIComponent(name)}` }, `${name}'s push records`)),
    el("section", { class: "card" }, el("h2", {}, "Devices"), devicesError, devices, kickButton(path, name)),
    settingsForm(path, name, entity, settings.data, policy.data.timezone || "UTC"),
    preferencesForm(path, language.data.translationLanguage || "", chosen.data.templateName || "", templates.entities.map((t) => t.name)));
}

/**
 * The user's devices: every one bound for push, seen (connected before) or connected now (on any node), online or not,
 * when last seen, under which certificate; Unbind for a binding, Disconnect for a connected device.
 */
async function renderDevices(target, path, errorArea) {
  const [bindings, seen] = await Promise.all([call("GET", `${path}/push/binding`), call("GET", `${path}/devices`)]);
  const devices = new Map(seen.entities.map((d) => [d.device_id, d]));
  const unbound = seen.entities.filter((d) => !bindings.entities.some((b) => b.device_id === d.device_id)).map((d) => d.device_id);
  if (!bindings.entities.length && !unbound.length) { target.replaceChildren(el("p", {}, "No device is bound for push or has connected.")); return; }
  const isOnline = (id) => Boolean(devices.get(id) && devices.get(id).online);
  const state = (id) => el("td", { class: isOnline(id) ? "online" : "offline" }, isOnline(id) ? "online" : "offline");
  const lastSeen = (id) => el("td", {}, devices.get(id) && devices.get(id).last_seen ? time(devices.get(id).last_seen) : isOnline(id) ? "now" : "never");
  /** A button that asks, runs `run` (disabled meanwhile), then shows the devices again with the notice `run` answers, or the error. */
  const action = (label, id, question, failure, run) => {
    const button = el("button", { type: "button", class: "danger", "aria-label": `${label} ${id}` }, label);
    button.addEventListener("click", async () => {
      if (!window.confirm(question)) return;
      errorArea.textContent = "";
      button.disabled = true;
      try {
        const notice = await run();
        await renderDevices(target, path, errorArea);
        if (notice) errorArea.textContent = notice;
      } catch (error) {
        errorArea.textContent = `${failure}: ${error.message}`;
        button.disabled = false;
      }
    });
    return button;
  };
  const disconnect = (id) => isOnline(id)
    ? action("Disconnect", id, `Disconnect device ${id}? The app there stops and asks to sign in again; other devices stay.`,
      `Could not disconnect ${id}`, async () => {
        await call("DELETE", `${path}/disconnect/${encodeURIComponent(id)}`);
        return (await untilOffline(path, id)) ? "" : `${id} was asked to close its connection and still counts as online after 10 s.`;
      })
    : null;
  target.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ["Device", "Now", "Last seen", "Certificate", "Device token", "VoIP token", ""].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, bindings.entities.map((b) => el("tr", { "data-device": b.device_id }, el("td", { class: "mono" }, b.device_id), state(b.device_id),
      lastSeen(b.device_id), el("td", {}, b.notifier_name), el("td", { class: "mono" }, b.device_token), el("td", { class: "mono" }, b.voip_token || ""),
      el("td", { class: "actions" },
        action("Unbind", b.device_id, `Unbind device ${b.device_id}? It gets no pushes until the app binds it again.`, `Could not unbind ${b.device_id}`,
          async () => { await call("PUT", `${path}/push/binding`, { device_id: b.device_id, device_token: "", notifier_name: b.notifier_name }); }),
        disconnect(b.device_id)))),
    unbound.map((id) => el("tr", { "data-device": id }, el("td", { class: "mono" }, id), state(id), lastSeen(id),
      el("td", { colspan: "3" }, "not bound for push"), el("td", { class: "actions" }, disconnect(id)))))));
}

/**
 * Waits, 40 reads 250 ms apart at most, until the device no longer counts as online (then true): a disconnect asks its connection
 * to close, and the server marks it offline when the session has ended (after the close handshake and its clean-up).
 */
async function untilOffline(path, id) {
  for (let attempt = 0; attempt < 40; attempt += 1) {
    const seen = await call("GET", `${path}/devices`);
    if (!seen.entities.some((d) => d.device_id === id && d.online)) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

/** The language pushes are translated to and the template the user's pushes use (Easemob's per-user choices). */
function preferencesForm(path, language, template, templates) {
  const choice = el("select", {}, el("option", { value: "", selected: !template }, "none (the message's own, or the default text)"),
    templates.map((t) => el("option", { value: t, selected: t === template }, t)));
  const form = el("form", { class: "card", id: "push-preferences", novalidate: true },
    el("h2", {}, "Language and template"),
    field("Push language", "push_language", el("input", { type: "text", value: language, placeholder: "en" }),
      "A language code such as en, ja or zh-Hans; empty for none."),
    field("Template", "push_template", choice),
    el("p", { class: "form-error", id: "preferences-error", role: "alert" }),
    el("p", { class: "notice", id: "preferences-notice", role: "status" }),
    el("button", { type: "submit" }, "Save"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    form.querySelector("#preferences-notice").textContent = "";
    try {
      await call("PUT", `${path}/notification/language`, { translationLanguage: form.elements.push_language.value.trim() });
    } catch (error) {
      setFieldError(form, "push_language", error.message);
      return;
    }
    try {
      await call("PUT", `${path}/notification/template`, { templateName: choice.value });
    } catch (error) {
      setFieldError(form, "push_template", error.message);
      return;
    }
    form.querySelector("#preferences-notice").textContent = "Saved.";
  });
  return form;
}

function kickButton(path, name) {
  const status = el("p", { class: "notice", id: "kick-notice", role: "status" });
  const error = el("p", { class: "form-error", id: "kick-error", role: "alert" });
  const kick = el("button", { type: "button", class: "secondary", id: "kick" }, "Log out everywhere");
  kick.addEventListener("click", async () => {
    if (!window.confirm(`Log ${name} out on every device? Their tokens are revoked and their devices unbound.`)) return;
    status.textContent = "";
    error.textContent = "";
    try {
      await call("POST", `${path}/disconnect`);
    } catch (failure) {
      error.textContent = `Could not log ${name} out: ${failure.message}`;
      return;
    }
    status.textContent = `${name} was logged out everywhere.`;
  });
  return el("div", {}, kick, status, error);
}

/**
 * The user's push settings and profile: push mode, quiet hours and do not disturb (shown in the user's time zone, else
 * the app's default one), display style, push nickname and time zone.
 */
function settingsForm(path, name, user, settings, defaultZone) {
  const zoneText = () => user.timezone || `not set: the app's default, ${defaultZone}`;
  const quietHint = () => `Every day, in ${name}'s time zone (${zoneText()}); empty for none.`;
  // The API answers ignoreDuration as the instant it ends (absent when none is running).
  const dndHint = (until) => until
    ? `Now silent until ${zonedTime(until, user.timezone, defaultZone)}; 0 ends it.` : "Silences every push from now on; 0 or empty for none.";
  const mode = el("select", {}, ["ALL", "AT", "NONE"].map((m) => el("option", { value: m, selected: (settings.type || "ALL") === m },
    { ALL: "every message", AT: "only mentions", NONE: "nothing" }[m])));
  const style = el("select", {}, el("option", { value: "0", selected: user.notification_display_style !== 1 }, "“You have a new message”"),
    el("option", { value: "1", selected: user.notification_display_style === 1 }, "sender and text"));
  const form = el("form", { class: "card", id: "push-settings", novalidate: true },
    el("h2", {}, "Push settings"),
    field("Push for", "mode", mode),
    field("Time zone", "user_timezone",
      el("input", { type: "text", value: user.timezone || "", placeholder: defaultZone, autocomplete: "off", spellcheck: "false" }),
      `An IANA name (Asia/Tokyo, Europe/Paris): quiet hours and the times on this page follow it. Empty: the app's default (${defaultZone}); ` +
      "once set, it can be changed but not removed."),
    field("Quiet hours", "quiet_hours", el("input", { type: "text", value: settings.ignoreInterval || "", placeholder: "22:00-07:00" }),
      quietHint()),
    field("Do not disturb for (minutes)", "dnd_minutes", el("input", { type: "text", inputmode: "numeric", value: "" }),
      dndHint(settings.ignoreDuration)),
    field("Shown as", "display_style", style),
    field("Nickname in pushes", "nickname", el("input", { type: "text", value: user.nickname || "" }), "Empty: pushes show the username."),
    el("p", { class: "form-error", id: "settings-error", role: "alert" }),
    el("p", { class: "notice", id: "settings-notice", role: "status" }),
    el("button", { type: "submit" }, "Save"));
  const setHint = (id, text) => { form.querySelector(`#${id}-hint`).textContent = text; };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    form.querySelector("#settings-notice").textContent = "";
    const zone = form.elements.user_timezone.value.trim();
    // PUT /users/{u} takes an IANA name only: a user's time zone cannot go back to "not set".
    if (!zone && user.timezone) {
      setFieldError(form, "user_timezone", `A time zone can be changed but not removed: enter an IANA name (the app's default is ${defaultZone}).`);
      return;
    }
    const body = { type: mode.value, ignoreInterval: form.elements.quiet_hours.value.trim() };
    const minutes = form.elements.dnd_minutes.value.trim();
    if (minutes !== "") {
      if (!/^[0-9]+$/.test(minutes)) { setFieldError(form, "dnd_minutes", "A whole number of minutes."); return; }
      body.ignoreDuration = Number(minutes) * 60000;
    }
    let saved;
    try {
      saved = (await call("PUT", `${path}/notification/user/${encodeURIComponent(name)}`, body)).data || {};
    } catch (error) {
      const target = /ignoreInterval/.test(error.message) ? "quiet_hours" : /ignoreDuration/.test(error.message) ? "dnd_minutes" : null;
      if (target) setFieldError(form, target, error.message); else form.querySelector("#settings-error").textContent = error.message;
      return;
    }
    const changes = { notification_display_style: Number(style.value) };
    // An empty nickname clears it (pushes then show the username).
    const nickname = form.elements.nickname.value.trim();
    if (nickname !== (user.nickname || "")) changes.nickname = nickname;
    if (zone && zone !== user.timezone) changes.timezone = zone;
    try {
      const answer = await call("PUT", path, changes);
      Object.assign(user, (answer && answer.entities && answer.entities[0]) || {});
    } catch (error) {
      const target = /time ?zone/i.test(error.message) ? "user_timezone" : /nickname/i.test(error.message) ? "nickname" : null;
      if (target) setFieldError(form, target, error.message); else form.querySelector("#settings-error").textContent = error.message;
      return;
    }
    form.elements.dnd_minutes.value = "";
    setHint("quiet_hours", quietHint());
    setHint("dnd_minutes", dndHint(saved.ignoreDuration));
    form.querySelector("#settings-notice").textContent = "Saved.";
  });
  return form;
}

// MARK: Templates

async function templatesPage() {
  const list = el("div", { class: "table-wrap", id: "template-list" });
  const listError = el("p", { class: "form-error", id: "template-list-error", role: "alert" });
  const editor = el("div", {});
  show("Push templates", el("section", { class: "card" }, el("h2", {}, "Templates"), listError, list), editor);
  const load = async () => {
    const templates = (await call("GET", "notification/template")).entities;
    if (!templates.length) { list.replaceChildren(el("p", {}, "No template yet.")); return; }
    list.replaceChildren(el("table", {},
      el("thead", {}, el("tr", {}, ["Name", "Title", "Content", "Updated", ""].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, templates.map((t) => {
        const edit = el("button", { type: "button", class: "secondary", "aria-label": `Edit ${t.name}` }, "Edit");
        edit.addEventListener("click", () => editor.replaceChildren(templateEditor(t, load)));
        const remove = el("button", { type: "button", class: "danger", "aria-label": `Delete ${t.name}` }, "Delete");
        remove.addEventListener("click", async () => {
          if (!window.confirm(`Delete template ${t.name}? Messages naming it fall back to the default text.`)) return;
          listError.textContent = "";
          try {
            await call("DELETE", `notification/template/${encodeURIComponent(t.name)}`);
            await load();
          } catch (error) {
            listError.textContent = `Could not delete ${t.name}: ${error.message}`;
          }
        });
        return el("tr", { "data-name": t.name }, el("td", {}, t.name), el("td", { class: "mono" }, t.title_pattern),
          el("td", { class: "mono" }, t.content_pattern), el("td", {}, time(t.updateAt)), el("td", {}, edit, " ", remove));
      }))));
  };
  editor.replaceChildren(templateEditor(null, load));
  await load();
}

/** Creates (`existing` null) or edits a template, with a preview rendered by the server's payload code as you type. */
function templateEditor(existing, onSaved) {
  const preview = el("section", { class: "card", id: "template-preview", "aria-live": "polite" }, el("h2", {}, "Preview"));
  const form = el("form", { class: "card", id: "template-form", novalidate: true },
    el("h2", {}, existing ? `Edit ${existing.name}` : "New template"),
    existing ? null : field("Template name", "template_name", el("input", { type: "text", required: true }), "Letters and digits: what messages name in em_push_template."),
    field("Title pattern", "title_pattern", el("input", { type: "text", value: existing ? existing.title_pattern : "" }),
      "{0}…{99} take the message's title_args; {$fromNickname}, {$msg} and {$dynamicFrom} are filled in."),
    field("Content pattern", "content_pattern", el("input", { type: "text", value: existing ? existing.content_pattern : "" })),
    field("Sample title arguments", "title_args", el("input", { type: "text" }), "Separated by |"),
    field("Sample content arguments", "content_args", el("input", { type: "text" }), "Separated by |"),
    field("Sample sender nickname", "sample_nickname", el("input", { type: "text", value: "Alice" })),
    field("Sample message", "sample_text", el("input", { type: "text", value: "See you at 8?" })),
    el("p", { class: "form-error", id: "template-error", role: "alert" }),
    el("p", { class: "notice", id: "template-notice", role: "status" }),
    el("button", { type: "submit" }, existing ? "Save" : "Create"));
  const args = (name) => form.elements[name].value ? form.elements[name].value.split("|") : [];
  let pending = null;
  const render = async () => {
    const body = { title_pattern: form.elements.title_pattern.value, content_pattern: form.elements.content_pattern.value,
      title_args: args("title_args"), content_args: args("content_args"), from_nickname: form.elements.sample_nickname.value,
      text: form.elements.sample_text.value };
    try {
      const answer = (await call("POST", "notification/template_preview", body)).data;
      setFieldError(form, "title_pattern", "");
      setFieldError(form, "content_pattern", "");
      preview.replaceChildren(el("h2", {}, "Preview"),
        el("p", {}, el("strong", {}, "Title: "), el("span", { id: "preview-title" }, answer.title || "(none)")),
        el("p", {}, el("strong", {}, "Body: "), el("span", { id: "preview-body" }, answer.content || "")),
        el("p", { id: "preview-size", class: answer.shortened ? "expiring" : "hint" }, answer.shortened
          ? `Too long: shortened with "…" to fit APNs' limit (${answer.bytes} of ${answer.limit} bytes)`
          : `${answer.bytes} of ${answer.limit} bytes`),
        el("pre", {}, JSON.stringify(answer.payload, null, 2)));
    } catch (error) {
      const target = /content_pattern/.test(error.message) ? "content_pattern" : "title_pattern";
      setFieldError(form, target, error.message);
    }
  };
  form.addEventListener("input", () => {
    clearTimeout(pending);
    pending = setTimeout(render, 250);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    form.querySelector("#template-error").textContent = "";
    const body = { title_pattern: form.elements.title_pattern.value, content_pattern: form.elements.content_pattern.value };
    try {
      if (existing) {
        await call("PUT", `notification/template/${encodeURIComponent(existing.name)}`, body);
      } else {
        body.name = form.elements.template_name.value.trim();
        await call("POST", "notification/template", body);
      }
      form.querySelector("#template-notice").textContent = existing ? `Saved ${existing.name}.` : `Created ${body.name}.`;
      await onSaved();
    } catch (error) {
      if (!existing && /name/.test(error.message)) setFieldError(form, "template_name", error.message);
      else form.querySelector("#template-error").textContent = error.message;
    }
  });
  if (existing) setTimeout(render, 0);
  return el("div", {}, form, preview);
}

// MARK: Policy

const displayStringKeys = { new_message: "A new message (banner style)", image: "An image", voice: "A voice message", video: "A video", file: "A file", location: "A location", custom: "A custom message" };

async function policyPage() {
  const policy = (await call("GET", "push/policy")).data;
  const multi = el("select", {},
    el("option", { value: "all_offline", selected: policy.multi_device === "all_offline" }, "only when all the user's devices are offline"),
    el("option", { value: "any_offline", selected: policy.multi_device === "any_offline" }, "to every offline device, even if another is online"));
  const form = el("form", { class: "card", id: "policy", novalidate: true },
    field("Push to a user's offline devices", "multi_device", multi),
    field("Default time zone", "timezone", el("input", { type: "text", value: policy.timezone }),
      "An IANA name (Asia/Shanghai, Europe/Paris): quiet hours of users without their own time zone follow it."),
    el("label", {}, el("input", { type: "checkbox", id: "badge_counts_muted", name: "badge_counts_muted", checked: policy.badge_counts_muted }),
      " Muted conversations count in the badge"),
    el("h2", {}, "Display strings"),
    el("p", { class: "hint" }, "What a push says instead of the message (empty: Beacon's default, in English)."),
    Object.entries(displayStringKeys).map(([key, label]) =>
      field(label, `ds_${key}`, el("input", { type: "text", maxlength: 200, value: policy.display_strings[key] || "", placeholder: "default" }))),
    el("p", { class: "form-error", id: "policy-error", role: "alert" }),
    el("p", { class: "notice", id: "policy-notice", role: "status" }),
    el("button", { type: "submit" }, "Save"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    form.querySelector("#policy-notice").textContent = "";
    // Every key is sent: an empty one removes its override.
    const strings = {};
    for (const key of Object.keys(displayStringKeys)) strings[key] = form.elements[`ds_${key}`].value.trim();
    try {
      await call("PUT", "push/policy", { multi_device: multi.value, timezone: form.elements.timezone.value.trim(),
        badge_counts_muted: form.elements.badge_counts_muted.checked, display_strings: strings });
      form.querySelector("#policy-notice").textContent = "Saved.";
    } catch (error) {
      if (/time ?zone/i.test(error.message)) setFieldError(form, "timezone", error.message);
      else form.querySelector("#policy-error").textContent = error.message;
    }
  });
  show("Push policy", form);
}

// MARK: Sending a message

/**
 * Sends a text message as anyone, to users or groups, with Easemob's push fields in `ext`: silent, force, mentions,
 * a push title and content (`em_apns_ext`) and a push template with its arguments.
 */
async function sendPage() {
  const templates = (await call("GET", "notification/template")).entities.map((t) => t.name);
  const chatType = el("select", {}, el("option", { value: "users" }, "to users (chat)"), el("option", { value: "chatgroups" }, "to groups"));
  const template = el("select", {}, el("option", { value: "" }, "none"), templates.map((name) => el("option", { value: name }, name)));
  const checkbox = (id, label, hint) => el("div", { class: "field" },
    el("label", {}, el("input", { type: "checkbox", id, name: id, "aria-describedby": `${id}-hint` }), ` ${label}`),
    el("p", { class: "hint", id: `${id}-hint` }, hint));
  const form = el("form", { class: "card", id: "send", novalidate: true },
    field("From", "from", el("input", { type: "text", value: "admin" }), "The sender's username (the app may send as anyone)."),
    field("Chat type", "chat_type", chatType),
    field("To", "to", el("input", { type: "text", required: true }), "Usernames (chat) or group ids (groups), separated by commas."),
    field("Text", "text", el("textarea", { required: true })),
    el("fieldset", {}, el("legend", {}, "Push"),
      checkbox("send_silent", "Silent: push nobody", "em_ignore_notification: recorded as skipped (silent) for every receiver."),
      checkbox("send_force", "Force the push", "em_force_notification: past do-not-disturb and the push mode."),
      field("Mentions", "at_list", el("input", { type: "text" }),
        "em_at_list: usernames separated by commas, or all (reaches users who push only mentions)."),
      field("Push title", "push_title", el("input", { type: "text" }), "Optional: em_apns_ext.em_push_title."),
      field("Push content", "push_content", el("input", { type: "text" }), "Optional: em_apns_ext.em_push_content."),
      field("Push template", "push_template", template, "em_push_template: one of the app's templates, with its arguments."),
      field("Template title arguments", "template_title_args", el("input", { type: "text" }), "{0}, {1}… of the title pattern, separated by |"),
      field("Template content arguments", "template_content_args", el("input", { type: "text" }),
        "{0}, {1}… of the content pattern, separated by |")),
    el("p", { class: "form-error", id: "send-error", role: "alert" }),
    el("div", { id: "send-result", role: "status" }),
    el("button", { type: "submit" }, "Send"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    form.querySelector("#send-result").replaceChildren();
    const list = (name) => form.elements[name].value.split(",").map((s) => s.trim()).filter(Boolean);
    const to = list("to");
    if (!to.length) { setFieldError(form, "to", "Name at least one receiver."); return; }
    const body = { from: form.elements.from.value.trim(), to, type: "txt", body: { msg: form.elements.text.value } };
    const ext = {};
    if (form.elements.send_silent.checked) ext.em_ignore_notification = true;
    if (form.elements.send_force.checked) ext.em_force_notification = true;
    const mentions = list("at_list");
    if (mentions.length === 1 && mentions[0].toLowerCase() === "all") ext.em_at_list = "all";
    else if (mentions.length) ext.em_at_list = mentions;
    const apns = {};
    if (form.elements.push_title.value.trim()) apns.em_push_title = form.elements.push_title.value.trim();
    if (form.elements.push_content.value.trim()) apns.em_push_content = form.elements.push_content.value.trim();
    if (Object.keys(apns).length) ext.em_apns_ext = apns;
    const args = (name) => form.elements[name].value ? form.elements[name].value.split("|") : [];
    if (template.value) {
      ext.em_push_template = { name: template.value, title_args: args("template_title_args"), content_args: args("template_content_args") };
    } else if (form.elements.template_title_args.value || form.elements.template_content_args.value) {
      setFieldError(form, "push_template", "Choose the template these arguments are for.");
      return;
    }
    if (Object.keys(ext).length) body.ext = ext;
    try {
      const answer = await call("POST", `messages/${chatType.value}`, body);
      const ids = Object.entries(answer.data || {});
      form.querySelector("#send-result").replaceChildren(el("p", { class: "notice" }, "Sent."),
        el("ul", {}, ids.map(([receiver, id]) => el("li", {}, `${receiver}: `, el("a", { href: `#/deliveries?message_id=${encodeURIComponent(id)}` }, `message ${id}`)))));
    } catch (error) {
      form.querySelector("#send-error").textContent = error.message;
    }
  });
  show("Send a message", form);
}

// MARK: Routing

const pages = { "#/overview": overviewPage, "#/certificates": certificatesPage, "#/users": usersPage, "#/user": userPage, "#/templates": templatesPage, "#/policy": policyPage, "#/deliveries": deliveriesPage, "#/send": sendPage };

async function route() {
  if (!console_.session) return;
  showGlobalError("");
  const path = location.hash.split("?")[0];
  const page = pages[path] || overviewPage;
  document.querySelectorAll("nav a").forEach((a) => {
    if (a.getAttribute("href") === path || (path === "#/user" && a.getAttribute("href") === "#/users")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  try {
    await page();
    document.getElementById("main").focus();
  } catch (error) {
    if (console_.session) show("Something went wrong", el("p", { class: "form-error", role: "alert" }, error.message));
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("sign-out").addEventListener("click", signOut);
  try {
    console_.session = await call("GET", "/console/session");
    signedIn();
  } catch (_) {
    showSignIn();
  }
});
