#!/usr/bin/env python3
"""The web console, end to end in a real headless Chromium (Playwright driving the system's Chromium: nothing downloads
a browser).

Runs `beacon serve --demo` in a fresh data directory, signs in with the credentials the demo printed, and checks what an
app developer does: a wrong secret is refused, the demo's push certificate is listed, a p8 generated here uploads and is
listed, bad uploads show their error next to the file field, a test push shows APNs' answer and its attempt in
Deliveries, a message sent from the console shows up in Deliveries as `sent` (and a silent group message as skipped,
`silent`), bob's do-not-disturb is shown in his time zone, a change without the CSRF token is refused, a tab whose session
was replaced goes back to the sign-in form, sign-out ends the session, and rotating the client secret (after a
confirmation) shows the new one once and ends the session. It takes screenshots of the main pages as it
goes: `--screenshots docs/console` refreshes the README's.

Usage: python3 e2e/console/console_test.py --beacon .build/debug/beacon [--chromium /usr/bin/chromium] [--screenshots DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright



class Failures:
    def __init__(self) -> None:
        self.count = 0
        self.passed = 0

    def step(self, name: str, action) -> None:
        try:
            action()
        except Exception as error:  # noqa: BLE001 - every failed check is reported, then the run goes on
            self.count += 1
            print(f"FAIL  {name}: {str(error).splitlines()[0] if str(error) else repr(error)}")
        else:
            self.passed += 1
            print(f"PASS  {name}")


def start_demo(beacon: str, workdir: Path) -> tuple[subprocess.Popen, str, dict, Path, str]:
    log_path = workdir / "beacon.log"
    log = open(log_path, "w")
    process = subprocess.Popen(
        [beacon, "serve", "--demo", "--port", "0", "--data-dir", str(workdir / "data")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir)
    deadline = time.monotonic() + 120
    text = ""
    while time.monotonic() < deadline:
        text = log_path.read_text()
        if "client secret" in text:
            break
        if process.poll() is not None:
            raise RuntimeError(f"beacon exited early:\n{text}")
        time.sleep(0.2)
    url = re.search(r"Or open the console: (http://\S+)/console/", text)
    client_id = re.search(r"client id\s+(\S+)", text)
    client_secret = re.search(r"client secret\s+(\S+)", text)
    if not (url and client_id and client_secret):
        process.kill()
        raise RuntimeError(f"the demo did not print the console and its credentials:\n{text}")
    control = re.search(r"control API (http://\S+) ", text)
    credentials = {"org": "demo", "app": "chat", "client_id": client_id.group(1), "client_secret": client_secret.group(1)}
    return process, url.group(1), credentials, log_path, control.group(1) if control else ""


def p8_key(workdir: Path) -> Path:
    key = workdir / "AuthKey_CONSOLE001.p8"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)], check=True,
                   capture_output=True)
    return key


def sign_in(page: Page, base: str, credentials: dict) -> None:
    page.goto(f"{base}/console/")
    page.get_by_label("Organization").fill(credentials["org"])
    page.get_by_label("App", exact=True).fill(credentials["app"])
    page.get_by_label("Client id").fill(credentials["client_id"])
    page.get_by_label("Client secret").fill(credentials["client_secret"])
    page.get_by_role("button", name="Sign in").click()


def upload(page: Page, name: str, file: Path, kind: str = "p8", password: str | None = None) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Kind").select_option(kind)
    page.get_by_label("Bundle id").fill("com.example.console")
    page.get_by_label("File").set_input_files(str(file))
    if kind == "p8":
        page.get_by_label("Key id").fill("CONSOLE001")
        page.get_by_label("Team id").fill("CONSOLETM1")
    elif password is not None:
        page.get_by_label("Certificate password").fill(password)
    page.get_by_role("button", name="Upload").click()


def run(beacon: str, chromium: str, screenshots: Path) -> int:
    failures = Failures()
    workdir = Path(tempfile.mkdtemp(prefix="beacon-console-"))
    process, base, credentials, log_path, control = start_demo(beacon, workdir)
    screenshots.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
            # A context of its own (one browser profile), so that a second tab can share its cookie.
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))

            def wrong_secret() -> None:
                sign_in(page, base, {**credentials, "client_secret": "wrong"})
                expect(page.locator("#sign-in-error")).to_contain_text("client_secret is wrong")
                page.screenshot(path=str(screenshots / "sign-in.png"))
            failures.step("a wrong client secret is refused on the sign-in form", wrong_secret)

            def signed_in() -> None:
                sign_in(page, base, credentials)
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()
                expect(page.locator("#figure-users .figure-value")).to_have_text("2")
                # No certificate expires soon: nothing stands in for the warning (it once showed "null").
                expect(page.locator("#main")).not_to_contain_text("null")
                expect(page.locator("#app-name")).to_have_text("demo/chat")
                # The app's identifiers: its client id and the Tencent SDKAppID it was created with.
                expect(page.locator("#client-id")).to_have_text(credentials["client_id"])
                expect(page.locator("#sdkappid")).to_have_text(re.compile(r"^1[4-9]\d{8}$|^2\d{9}$"))
                page.get_by_role("link", name="Push certificates").click()
                expect(page.locator('#certificate-list tr[data-name="demo-apns"]')).to_contain_text("com.example.beacon.demo")
            failures.step("signing in shows the demo's push certificate", signed_in)

            def session_cookie() -> None:
                cookie = next(c for c in page.context.cookies() if c["name"] == "beacon_console")
                assert cookie["httpOnly"], "the session cookie is readable by scripts"
                assert cookie["sameSite"] == "Strict", cookie["sameSite"]
                assert "beacon_console" not in page.evaluate("document.cookie"), "document.cookie shows the session"
            failures.step("the session cookie is HttpOnly and SameSite=Strict", session_cookie)

            key = p8_key(workdir)

            def upload_p8() -> None:
                upload(page, "console-p8", key)
                expect(page.locator("#upload-notice")).to_have_text("Uploaded console-p8.")
                row = page.locator('#certificate-list tr[data-name="console-p8"]')
                expect(row).to_contain_text("CONSOLE001 / CONSOLETM1")
                expect(row).to_contain_text("never (token key)")
            failures.step("a p8 generated here uploads and is listed", upload_p8)

            def test_push() -> None:
                page.get_by_label("Username").fill("bob")
                page.get_by_role("button", name="Send test push").click()
                answer = page.locator("#test-push-result table tbody tr")
                expect(answer).to_have_count(1)
                expect(answer.locator("td.status-sent")).to_have_text("sent")
                expect(answer).to_contain_text("200")
                apns_id = answer.locator("td.mono").last.inner_text()
                # The simulator got exactly that notification.
                with urllib.request.urlopen(f"{control}/deliveries?device_token={'0d' * 32}", timeout=10) as reply:
                    received = json.load(reply)["deliveries"]
                assert any(d["apns_id"] == apns_id for d in received), f"the simulator has no push with apns-id {apns_id}"
                # After the test push, so that the page shows APNs' answer.
                page.screenshot(path=str(screenshots / "certificates.png"), full_page=True)
                page.get_by_role("link", name="See it in Deliveries").click()
                row = page.locator("#delivery-list tbody tr").first
                expect(row.locator("td.status-sent")).to_have_text("sent")
                # Each APNs attempt is listed, with APNs' status and the apns-id the simulator got.
                row.locator("details.attempts summary").click()
                attempt = row.locator("details.attempts li").last
                expect(attempt).to_contain_text(apns_id)
                expect(attempt).to_contain_text("HTTP 200")
                page.get_by_role("link", name="Push certificates").click()
            failures.step("a test push to bob shows APNs' answer, reaches the simulator and is in Deliveries with its attempt", test_push)

            def test_push_by_token() -> None:
                page.get_by_label("Username").fill("")
                page.get_by_label("or Device token").fill("0D" * 32)
                page.get_by_role("button", name="Send test push").click()
                expect(page.locator("#test-push-result")).to_contain_text("APNs' answer for bob's devices")
                answer = page.locator("#test-push-result table tbody tr")
                expect(answer.locator("td.status-sent")).to_have_text("sent")
                apns_id = answer.locator("td.mono").last.inner_text()
                with urllib.request.urlopen(f"{control}/deliveries?device_token={'0d' * 32}", timeout=10) as reply:
                    received = json.load(reply)["deliveries"]
                assert any(d["apns_id"] == apns_id for d in received), f"the simulator has no push with apns-id {apns_id}"
                page.get_by_label("or Device token").fill("ee" * 32)
                page.get_by_role("button", name="Send test push").click()
                expect(page.locator("#test-push-error")).to_contain_text("no device is bound with this device token")
                page.get_by_label("or Device token").fill("")
            failures.step("a test push to a device token reaches its holder (bob) and an unbound token is refused", test_push_by_token)

            not_a_key = workdir / "not-a-key.p8"
            not_a_key.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")

            def bad_p8() -> None:
                upload(page, "console-bad", not_a_key)
                expect(page.locator("#file-error")).not_to_be_empty()
                expect(page.locator("#file")).to_have_attribute("aria-invalid", "true")
                expect(page.locator('#certificate-list tr[data-name="console-bad"]')).to_have_count(0)
            failures.step("a p8 that is not a P-256 key shows its error next to the file", bad_p8)

            garbage = workdir / "garbage.p12"
            garbage.write_bytes(os.urandom(300))

            def bad_p12() -> None:
                page.reload()
                upload(page, "console-bad", garbage, kind="p12", password="secret")
                expect(page.locator("#file-error, #password-error")).not_to_have_count(0)
                expect(page.locator("#file-error")).to_contain_text("p12")
            failures.step("a p12 that is not a certificate shows its error next to the field", bad_p12)

            def delete_certificate() -> None:
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_role("button", name="Delete console-p8").click()
                expect(page.locator('#certificate-list tr[data-name="console-p8"]')).to_have_count(0)
            failures.step("deleting a certificate asks, then removes it", delete_certificate)

            def send_and_see_delivery() -> None:
                page.get_by_role("link", name="Send a message").click()
                page.get_by_label("From").fill("alice")
                page.get_by_label("To", exact=True).fill("bob")
                page.get_by_label("Text").fill("hello from the console")
                page.get_by_role("button", name="Send").click()
                link = page.locator("#send-result a")
                expect(link).to_contain_text("message ")
                link.click()
                row = page.locator("#delivery-list tbody tr").first
                expect(row).to_contain_text("bob")
                # The simulator answers quickly; the record moves from pending to sent.
                deadline = time.monotonic() + 20
                while "sent" not in row.inner_text() and time.monotonic() < deadline:
                    time.sleep(0.3)
                    page.get_by_role("button", name="Filter").click()
                    row = page.locator("#delivery-list tbody tr").first
                expect(row.locator("td.status-sent")).to_have_text("sent")
                row.get_by_text("JSON").click()
                expect(row.locator("pre")).to_contain_text('"aps"')
                page.screenshot(path=str(screenshots / "deliveries.png"), full_page=True)
            failures.step("a message sent from the console is pushed and shows as sent in Deliveries", send_and_see_delivery)

            def dnd_skips_the_next_push() -> None:
                page.get_by_role("link", name="Users").click()
                page.get_by_label("Username starts with").fill("bo")
                page.get_by_role("button", name="Search").click()
                expect(page.locator("#user-list tbody tr")).to_have_count(1)
                page.get_by_role("link", name="bob", exact=True).click()
                expect(page.get_by_role("heading", name="User bob")).to_be_visible()
                expect(page.locator('#device-list tr[data-device="bob-iphone"]')).to_contain_text("demo-apns")
                save = page.locator("#push-settings").get_by_role("button", name="Save")
                page.locator("#user_timezone").fill("Mars/Olympus")
                save.click()
                expect(page.locator("#user_timezone-error")).to_contain_text("timezone")
                page.locator("#user_timezone").fill("Asia/Tokyo")
                page.get_by_label("Nickname in pushes").fill("Bobby")
                page.get_by_label("Do not disturb for (minutes)").fill("60")
                save.click()
                expect(page.locator("#settings-notice")).to_have_text("Saved.")
                page.reload()
                # The end of do-not-disturb is shown in bob's time zone, not the browser's.
                expect(page.locator("#dnd_minutes-hint")).to_contain_text("Now silent until")
                expect(page.locator("#dnd_minutes-hint")).to_contain_text("(Asia/Tokyo)")
                expect(page.locator("#user_timezone")).to_have_value("Asia/Tokyo")
                expect(page.get_by_label("Nickname in pushes")).to_have_value("Bobby")
                # An emptied nickname is cleared (pushes show the username again).
                page.get_by_label("Nickname in pushes").fill("")
                save.click()
                expect(page.locator("#settings-notice")).to_have_text("Saved.")
                page.reload()
                expect(page.get_by_label("Nickname in pushes")).to_have_value("")
                page.get_by_role("link", name="Send a message").click()
                page.get_by_label("From").fill("alice")
                page.get_by_label("To", exact=True).fill("bob")
                page.get_by_label("Text").fill("quiet please")
                page.get_by_role("button", name="Send").click()
                page.locator("#send-result a").click()
                row = page.locator("#delivery-list tbody tr").first
                expect(row.locator("td.status-skipped")).to_have_text("skipped")
                expect(row).to_contain_text("dnd")
            failures.step("bob's do-not-disturb set in Users skips the next message's push with reason dnd (shown in his time zone)",
                          dnd_skips_the_next_push)

            def silent_group_message() -> None:
                # A group with alice and bob, made with the console's own session (its CSRF token included).
                group = page.evaluate("""async () => {
                    const session = await (await fetch('/console/session', {headers: {Accept: 'application/json'}})).json();
                    const answer = await fetch('/demo/chat/chatgroups', {method: 'POST',
                        headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf_token},
                        body: JSON.stringify({groupname: 'console test', owner: 'alice', members: ['bob']})});
                    return (await answer.json()).data.groupid;
                }""")
                page.get_by_role("link", name="Send a message").click()
                page.get_by_label("From").fill("alice")
                page.get_by_label("Chat type").select_option("chatgroups")
                page.get_by_label("To", exact=True).fill(group)
                page.get_by_label("Text").fill("a silent group message")
                page.get_by_label("Silent").check()
                page.get_by_role("button", name="Send").click()
                expect(page.locator("#send-result")).to_contain_text(f"{group}: message ")
                page.locator("#send-result a").click()
                rows = page.locator("#delivery-list tbody tr")
                # (Recorded before the send is answered, skips included.)
                expect(rows).to_have_count(1)
                expect(rows.first).to_contain_text("bob")
                expect(rows.first.locator("td.status-skipped")).to_have_text("skipped")
                expect(rows.first).to_contain_text("silent")
            failures.step("a group message sent from the console with Silent checked is recorded as skipped with reason silent",
                          silent_group_message)

            def devices_online_and_preferences() -> None:
                password = re.search(r"\(password (\S+)\)", log_path.read_text())
                assert password, "the demo printed no password"
                # Bob's app, in another browser context: his bound phone and an unbound laptop connect over the WebSocket.
                app_page = browser.new_page()
                app_page.goto(f"{base}/console/")
                connected = app_page.evaluate("""async (password) => {
                    const answer = await (await fetch('/demo/chat/token', {method: 'POST', headers: {'Content-Type': 'application/json'},
                        body: JSON.stringify({grant_type: 'password', username: 'bob', password})})).json();
                    const open = (device) => new Promise((resolve, reject) => {
                        const socket = new WebSocket(`ws://${location.host}/demo/chat/ws?device_id=${device}&access_token=${answer.access_token}`);
                        // Online from the server's registration, which comes before `welcome` (not before the upgrade's answer).
                        socket.onmessage = (event) => { if (JSON.parse(event.data).op === 'welcome') resolve(device); };
                        socket.onerror = () => reject(new Error(`${device} could not connect`));
                        socket.onclose = () => reject(new Error(`${device} was closed before its welcome`));
                        window.sockets = (window.sockets || []).concat([socket]);
                    });
                    return Promise.all([open('bob-iphone'), open('bob-laptop')]);
                }""", password.group(1))
                assert connected == ["bob-iphone", "bob-laptop"], connected
                page.goto(f"{base}/console/#/user?name=bob")
                expect(page.locator('#device-list tr[data-device="bob-iphone"] td.online')).to_have_text("online")
                expect(page.locator('#device-list tr[data-device="bob-laptop"]')).to_contain_text("not bound for push")
                page.screenshot(path=str(screenshots / "user.png"), full_page=True)
                # Disconnecting the laptop closes its connection (closing: kicked) and leaves the phone connected.
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_role("button", name="Disconnect bob-laptop").click()
                expect(page.locator('#device-list tr[data-device="bob-laptop"] td.offline')).to_have_text("offline")
                expect(page.locator('#device-list tr[data-device="bob-iphone"] td.online')).to_have_text("online")
                app_page.wait_for_function("window.sockets[1].readyState === WebSocket.CLOSED && window.sockets[0].readyState === WebSocket.OPEN")
                app_page.close()
                # The server marks the phone offline once its session has ended; the page shows what it read when loaded.
                phone_offline = page.locator('#device-list tr[data-device="bob-iphone"] td.offline')
                for _ in range(40):
                    page.reload()
                    expect(page.locator('#device-list tr[data-device="bob-iphone"]')).to_be_visible()
                    if phone_offline.count():
                        break
                    time.sleep(0.5)
                expect(phone_offline).to_have_text("offline")
                # Both were seen: listed offline, each with when (not "never").
                expect(page.locator('#device-list tr[data-device="bob-laptop"] td.offline')).to_have_text("offline")
                for device in ("bob-iphone", "bob-laptop"):
                    expect(page.locator(f'#device-list tr[data-device="{device}"] td').nth(2)).not_to_have_text(re.compile("never|now"))
                page.get_by_label("Push language").fill("no such language!")
                page.locator("#push-preferences").get_by_role("button", name="Save").click()
                expect(page.locator("#push_language-error")).to_contain_text("translationLanguage")
                page.get_by_label("Push language").fill("ja")
                page.locator("#push-preferences").get_by_role("button", name="Save").click()
                expect(page.locator("#preferences-notice")).to_have_text("Saved.")
                page.reload()
                expect(page.get_by_label("Push language")).to_have_value("ja")
            failures.step("bob's page shows his devices online or not with when each was seen, disconnects one, and saves his push language",
                          devices_online_and_preferences)

            def templates() -> None:
                page.get_by_role("link", name="Templates").click()
                page.get_by_label("Template name").fill("welcome")
                page.get_by_label("Title pattern").fill("Hi {0}")
                page.get_by_label("Content pattern").fill("{$fromNickname}: {$msg}")
                page.get_by_label("Sample title arguments").fill("Ann")
                expect(page.locator("#preview-title")).to_have_text("Hi Ann")
                expect(page.locator("#preview-body")).to_have_text("Alice: See you at 8?")
                expect(page.locator("#preview-size")).to_contain_text("of 4096 bytes")
                expect(page.locator("#preview-size")).not_to_contain_text("Too long")
                # Texts too long for APNs' 4 KB are shortened as real pushes are, and the preview says so.
                page.get_by_label("Content pattern").fill("{0}{0}{0}{0}{0}")
                page.get_by_label("Sample content arguments").fill("x" * 1000)
                expect(page.locator("#preview-size")).to_contain_text("Too long: shortened")
                expect(page.locator("#preview-body")).to_contain_text("…")
                page.get_by_label("Sample content arguments").fill("")
                page.get_by_label("Content pattern").fill("{$fromNickname}: {$msg}")
                expect(page.locator("#preview-size")).not_to_contain_text("Too long")
                page.get_by_label("Title pattern").fill("Hi {nope}")
                expect(page.locator("#title_pattern-error")).not_to_be_empty()
                page.get_by_label("Title pattern").fill("Hello {0}")
                expect(page.locator("#preview-title")).to_have_text("Hello Ann")
                page.screenshot(path=str(screenshots / "templates.png"), full_page=True)
                page.get_by_role("button", name="Create").click()
                expect(page.locator('#template-list tr[data-name="welcome"]')).to_contain_text("Hello {0}")
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_role("button", name="Delete welcome").click()
                expect(page.locator('#template-list tr[data-name="welcome"]')).to_have_count(0)
            failures.step("a template previews live (rendered by the server), shows a bad pattern's error, is created and deleted", templates)

            def policy() -> None:
                page.get_by_role("link", name="Policy").click()
                page.get_by_label("Default time zone").fill("Mars/Olympus")
                page.get_by_role("button", name="Save").click()
                expect(page.locator("#timezone-error")).not_to_be_empty()
                page.get_by_label("Default time zone").fill("Asia/Shanghai")
                page.get_by_label("An image").fill("[图片]")
                page.get_by_role("button", name="Save").click()
                expect(page.locator("#policy-notice")).to_have_text("Saved.")
                page.reload()
                expect(page.get_by_label("Default time zone")).to_have_value("Asia/Shanghai")
                expect(page.get_by_label("An image")).to_have_value("[图片]")
                page.screenshot(path=str(screenshots / "policy.png"), full_page=True)
                page.get_by_label("An image").fill("")
                page.get_by_role("button", name="Save").click()
                expect(page.locator("#policy-notice")).to_have_text("Saved.")
                page.reload()
                expect(page.get_by_label("An image")).to_have_value("")
            failures.step("the policy page saves the time zone and display strings (and removes one), and shows a bad time zone's error", policy)

            def overview_counts() -> None:
                page.get_by_role("link", name="Overview").click()
                expect(page.locator("#figure-messages-day .figure-value")).to_have_text("3")  # two chats and a group message
                day = page.locator("#pushes-day tbody")
                expect(day.locator("tr", has_text="dnd")).to_contain_text("1")
                expect(day.locator("tr").filter(has=page.locator("td.status-sent"))).to_contain_text("3")  # two test pushes and a message
                page.screenshot(path=str(screenshots / "overview.png"), full_page=True)
                day.get_by_role("link", name="dnd").click()
                expect(page.locator("#delivery-list tbody tr")).to_have_count(1)
                expect(page.locator("#delivery-list tbody tr")).to_contain_text("dnd")
            failures.step("the overview counts today's messages and pushes by outcome, linking to the records", overview_counts)

            def csrf_refused() -> None:
                status = page.evaluate("""async () => (await fetch('/demo/chat/push/certificates/demo-apns',
                    {method: 'DELETE', credentials: 'same-origin'})).status""")
                assert status == 403, f"a DELETE without the CSRF token answered {status}"
                # Easemob's GET …/disconnect logs a user out: a GET made with the cookie needs the token too.
                status = page.evaluate("async () => (await fetch('/demo/chat/users/bob/disconnect')).status")
                assert status == 403, f"a GET disconnect without the CSRF token answered {status}"
                page.get_by_role("link", name="Push certificates").click()
                expect(page.locator('#certificate-list tr[data-name="demo-apns"]')).to_have_count(1)
            failures.step("a request without the CSRF token is refused (a change, and a GET that changes)", csrf_refused)

            def stale_tab_signs_in_again() -> None:
                # Signing in again in another tab replaces this tab's session: its CSRF token is stale (403), and it
                # goes back to the sign-in form instead of showing an error.
                other = page.context.new_page()  # the same browser: it shares the cookie, so it opens signed in
                other.goto(f"{base}/console/")
                expect(other.get_by_role("heading", name="Overview")).to_be_visible()
                status = other.evaluate("""async (credentials) => (await fetch('/console/session', {method: 'POST',
                    headers: {'Content-Type': 'application/json'}, body: JSON.stringify(credentials)})).status""", credentials)
                assert status == 200, f"signing in again answered {status}"
                page.get_by_role("link", name="Users").click()
                expect(page.get_by_role("button", name="Sign in")).to_be_visible()
                expect(page.locator("#sign-in")).to_contain_text("another tab")
                other.close()
                page.get_by_label("Organization").fill(credentials["org"])
                page.get_by_label("App", exact=True).fill(credentials["app"])
                page.get_by_label("Client id").fill(credentials["client_id"])
                page.get_by_label("Client secret").fill(credentials["client_secret"])
                page.get_by_role("button", name="Sign in").click()
                expect(page.get_by_role("heading", name="Users")).to_be_visible()
            failures.step("a tab whose session was replaced by signing in in another tab returns to the sign-in form", stale_tab_signs_in_again)

            def sign_out() -> None:
                old = next(c for c in page.context.cookies() if c["name"] == "beacon_console")
                page.get_by_role("button", name="Sign out").click()
                expect(page.get_by_role("button", name="Sign in")).to_be_visible()
                expect(page.locator("#sign-in")).to_contain_text("Signed out.")
                page.reload()
                expect(page.get_by_role("button", name="Sign in")).to_be_visible()
                # The old cookie, put back by hand, opens nothing: the session ended on the server.
                page.context.add_cookies([old])
                status = page.evaluate("async () => (await fetch('/demo/chat/push/certificates')).status")
                assert status == 401, f"the ended session still answered {status}"
            failures.step("sign-out ends the session", sign_out)

            def phone_layout() -> None:
                phone = browser.new_page(viewport={"width": 390, "height": 844})
                sign_in(phone, base, credentials)
                expect(phone.get_by_role("heading", name="Overview")).to_be_visible()
                width = phone.evaluate("document.documentElement.scrollWidth")
                assert width <= 390, f"the page is {width} px wide on a 390 px screen"
                phone.close()
            failures.step("readable on a phone screen (no horizontal scrolling)", phone_layout)

            def rotate_secret() -> None:
                # Last: the demo app's printed secret stops working.
                sign_in(page, base, credentials)
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()
                page.once("dialog", lambda dialog: dialog.dismiss())
                page.get_by_role("button", name="Rotate client secret").click()
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()
                # A wrong current secret rotates nothing.
                page.once("dialog", lambda dialog: dialog.accept("not the secret"))
                page.get_by_role("button", name="Rotate client secret").click()
                expect(page.locator("#rotate-error")).to_contain_text("client_secret is wrong")
                old = next(c for c in page.context.cookies() if c["name"] == "beacon_console")
                page.once("dialog", lambda dialog: dialog.accept(credentials["client_secret"]))
                page.get_by_role("button", name="Rotate client secret").click()
                expect(page.get_by_role("button", name="Sign in")).to_be_visible()
                expect(page.locator("#sign-in")).to_contain_text("this one too")
                expect(page.locator("#new-client-id")).to_have_text(credentials["client_id"])
                secret = page.locator("#new-client-secret").inner_text()
                assert secret and secret != credentials["client_secret"], f"no new secret shown ({secret!r})"
                # The Tencent secret key is rotated with it, shown once beside it.
                expect(page.locator("#new-sdk-secret-key")).to_have_text(re.compile(r"^[0-9a-f]{64}$"))
                # The session ended on the server: its cookie, put back by hand, opens nothing.
                page.context.add_cookies([old])
                status = page.evaluate("async () => (await fetch('/demo/chat/push/certificates')).status")
                assert status == 401, f"the session of the rotated secret still answered {status}"
                sign_in(page, base, credentials)
                expect(page.locator("#sign-in-error")).to_contain_text("client_secret is wrong")
                sign_in(page, base, {**credentials, "client_secret": secret})
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()
            failures.step("rotating the client secret asks for the current one, shows the new secret once and ends the session; only the new secret signs in",
                          rotate_secret)

            failures.step("no script errors", lambda: (_ for _ in ()).throw(AssertionError("; ".join(errors))) if errors else None)
            browser.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        if failures.count:
            print(log_path.read_text()[-4000:])
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{failures.passed} passed, {failures.count} failed")
    return 1 if failures.count else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beacon", required=True)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--screenshots", help="where to save screenshots (default: a temporary directory)")
    args = parser.parse_args()
    screenshots = Path(args.screenshots) if args.screenshots else Path(tempfile.mkdtemp(prefix="beacon-console-shots-"))
    return run(str(Path(args.beacon).resolve()), args.chromium, screenshots.resolve())


if __name__ == "__main__":
    sys.exit(main())
