#!/usr/bin/env python3
"""Tencent Cloud IM's REST door (`/v4/...`, docs/tencent.md), checked from outside with a real Tencent IM server SDK.

The SDK is PyPI's `timsdk` (a Tencent IM REST client; its UserSigs come from Tencent's own generator, PyPI
`tls-sig-api-v2`). Its only change is its host: Tencent's `https://console.tim.qq.com` becomes the local `beacon serve
--demo`. The demo's user bob is offline with a simulated iPhone bound; what the pushes carry is read back from the
APNs simulator's control API, and the same user is read back through the Easemob door.

    python3 e2e/tencent/tencent_test.py --beacon .build/debug/beacon

Prints one line per check and exits 1 if any failed.
"""

import argparse
import json
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import TLSSigAPIv2
import timsdk
from timsdk.http_client import HttpClient

SDKAPPID = 1400012345
BOB_TOKEN = "0d" * 32  # the demo's simulated iPhone of bob


class Report:
    def __init__(self) -> None:
        self.failures = 0

    def check(self, condition: bool, label: str, detail: object = "") -> bool:
        print(("ok    " if condition else "FAIL  ") + label + ("" if condition else f": {detail}"), flush=True)
        if not condition:
            self.failures += 1
        return condition


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: object = None, headers: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


class Beacon:
    """`beacon serve --demo` in a fresh data directory."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.data_dir = workdir / "data"
        self.port = free_port()
        self.log_path = workdir / "beacon.log"
        self.log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [binary, "serve", "--demo", "--port", str(self.port), "--data-dir", str(self.data_dir)],
            stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"beacon serve exited:\n{self.log()[-3000:]}")
            if "Demo ready" in self.log():
                return
            time.sleep(0.2)
        raise RuntimeError(f"beacon serve was not ready within {timeout:.0f} s:\n{self.log()[-3000:]}")

    def cli(self, *arguments: str) -> str:
        out = subprocess.run([self.binary, *arguments, "--data-dir", str(self.data_dir)], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"beacon {' '.join(arguments)} failed: {out.stderr.strip()[:500]}")
        return out.stdout

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=25)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log_file.close()


def tim_client(port: int, key: str, identifier: str = "administrator", sig: str | None = None) -> timsdk.TimClient:
    """timsdk's client with its host changed, nothing else (its URL, query, body and UserSig stay the SDK's own)."""
    client = timsdk.TimClient(SDKAPPID, key, identifier)
    http_client = client.open_im.get_client()
    if sig is not None:
        http_client._signature = sig
    original = HttpClient.get_url

    def local_url(self: HttpClient, path: str, random_id: int = 0) -> str:
        return original(self, path, random_id).replace("https://console.tim.qq.com", f"http://127.0.0.1:{port}")

    http_client.get_url = local_url.__get__(http_client, HttpClient)
    return client


class Simulator:
    def __init__(self, port: int) -> None:
        self.port = port

    def deliveries(self) -> list[dict]:
        _, answer = http("GET", f"http://127.0.0.1:{self.port}/deliveries?device_token={BOB_TOKEN}")
        return answer.get("deliveries", [])

    def wait_for(self, count: int, timeout: float = 60) -> list[dict]:
        """Bob's deliveries once there are `count` (a bound on the wait, not a timing assertion)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.deliveries()
            if len(found) >= count:
                return found
            time.sleep(0.1)
        return self.deliveries()


def payload(delivery: dict) -> dict:
    body = delivery.get("payload")
    return json.loads(body) if isinstance(body, str) else (body or {})


def run(binary: str) -> int:
    report = Report()
    workdir = Path(tempfile.mkdtemp(prefix="beacon-tencent-"))
    beacon = Beacon(binary, workdir)
    try:
        beacon.wait_ready()
        log = beacon.log()
        control = re.search(r"control API http://127\.0\.0\.1:(\d+)", log)
        app_token = re.search(r"Authorization: Bearer ([A-Za-z0-9._\-]+)", log)
        if not report.check(bool(control and app_token), "the demo prints the simulator's control API and an app token", log[-2000:]):
            return 1
        simulator = Simulator(int(control.group(1)))
        easemob = f"http://127.0.0.1:{beacon.port}/demo/chat"
        app_headers = {"Authorization": f"Bearer {app_token.group(1)}"}

        # Bob's alerts show what was sent (MessageSummary), so that the checks below can tell the messages apart.
        status, _ = http("PUT", f"{easemob}/users/bob", {"notification_display_style": 1}, app_headers)
        report.check(status == 200, "bob's alerts show the message text", status)

        # An app moving from Tencent keeps its SDKAppID and secret key.
        key = secrets.token_hex(32)
        identity = json.loads(beacon.cli("app", "tencent", "demo/chat", "--sdkappid", str(SDKAPPID), "--secret-key", key, "--json"))
        report.check(identity.get("sdkappid") == SDKAPPID and identity.get("sdk_secret_key") == key, "beacon app tencent imports the SDKAppID and key", identity)

        tim = tim_client(beacon.port, key)
        answer = tim.im_open_login_svc.account_import("carol", nick="Carol C")
        report.check(answer.get("ActionStatus") == "OK" and answer.get("ErrorCode") == 0, "account_import", answer)
        answer = tim.im_open_login_svc.im_open_login_svc(["dave", "Not-Valid"])
        report.check(answer.get("FailAccounts") == ["Not-Valid"], "multiaccount_import answers what it could not import", answer)
        answer = tim.im_open_login_svc.account_check(["bob", "carol", "nobody"])
        statuses = {item["UserID"]: item["AccountStatus"] for item in answer.get("ResultItem", [])}
        report.check(statuses == {"bob": "Imported", "carol": "Imported", "nobody": "NotImported"}, "account_check (sent as GET by timsdk)", answer)

        # 1:1 to bob (offline, bound): the push carries OfflinePushInfo's title, desc and sound.
        before = len(simulator.deliveries())
        post = tim.open_im._post
        first = {
            "SyncOtherMachine": 2, "From_Account": "carol", "To_Account": "bob", "MsgRandom": 1001, "MsgTimeStamp": int(time.time()),
            "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "hello from tencent"}}],
            "OfflinePushInfo": {"PushFlag": 0, "Title": "Carol", "Desc": "You have a message", "Ext": "{\"entity\":1}",
                                "ApnsInfo": {"Sound": "ping.caf", "SubTitle": "sub"}}}
        answer = post("openim/sendmsg", data=first)
        report.check(answer.get("ActionStatus") == "OK" and answer.get("MsgKey") and answer.get("MsgTime"), "sendmsg answers MsgKey and MsgTime", answer)
        first_key = answer.get("MsgKey")
        found = simulator.wait_for(before + 1)
        if report.check(len(found) == before + 1, "the push reaches the simulator", found):
            aps = payload(found[-1]).get("aps", {})
            alert = aps.get("alert", {})
            report.check(alert.get("title") == "Carol" and alert.get("body") == "You have a message" and alert.get("subtitle") == "sub"
                         and aps.get("sound") == "ping.caf", "title, desc, subtitle and sound come from OfflinePushInfo", payload(found[-1]))
            report.check(payload(found[-1]).get("ext") == "{\"entity\":1}", "Ext reaches the phone as Tencent puts it", payload(found[-1]))

        # The same send again (same sender, MsgRandom and MsgTimeStamp) is the same message, stored and pushed once.
        again = post("openim/sendmsg", data=first)
        report.check(again.get("MsgKey") == first_key, "a repeated MsgRandom is answered with the first MsgKey", again)

        # PushFlag 1: no push. A later message's push arrives, and the PushFlag one's never came before it.
        count = len(simulator.deliveries())
        post("openim/sendmsg", data={"From_Account": "carol", "To_Account": "bob", "MsgRandom": 1002,
                                     "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "quiet"}}],
                                     "OfflinePushInfo": {"PushFlag": 1}})
        answer = tim.open_im.batch_send_text_msg(["bob", "nobody"], "batch hello", from_account="carol")
        report.check([e.get("To_Account") for e in answer.get("ErrorList", [])] == ["nobody"] and answer.get("ErrorList")[0].get("ErrorCode") == 70107,
                     "batchsendmsg sends to the imported and lists the rest", answer)
        found = simulator.wait_for(count + 1)
        texts = [payload(d).get("aps", {}).get("alert", {}).get("body", "") for d in found[count:]]
        report.check(len(found) >= count + 1 and not any("quiet" in t for t in texts) and "batch hello" in texts[0],
                     "PushFlag 1 is not pushed; the batch message is", texts)

        # Another batch with the same MsgRandom and other receivers is another message.
        count = len(simulator.deliveries())
        batch = {"From_Account": "carol", "MsgRandom": 4242, "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "to alice"}}]}
        post("openim/batchsendmsg", data={**batch, "To_Account": ["alice"]})
        answer = post("openim/batchsendmsg", data={**batch, "To_Account": ["bob"], "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "to bob"}}]})
        found = simulator.wait_for(count + 1)
        report.check(bool(answer.get("MsgKey")) and len(found) == count + 1 and "to bob" in payload(found[-1]).get("aps", {}).get("alert", {}).get("body", ""),
                     "a batch with a MsgRandom used before, to others, is sent", answer)

        answer = tim.open_im.query_state(["bob", "alice", "nobody"])
        states = {item["To_Account"]: item.get("State") for item in answer.get("QueryResult", [])}
        report.check(states == {"bob": "PushOnline", "alice": "Offline"} and answer.get("ErrorList", [{}])[0].get("ErrorCode") == 70107,
                     "querystate: PushOnline (bound, not connected), Offline, and 70107", answer)

        # Groups.
        group = tim.group_open_http_svc.create_group("Tencent group", owner_account="alice", member_list=[{"Member_Account": "carol"}])
        group_id = group.get("GroupId")
        report.check(group.get("ActionStatus") == "OK" and bool(group_id), "create_group answers GroupId", group)
        answer = tim.group_open_http_svc.add_group_member(group_id, [{"Member_Account": "bob"}, {"Member_Account": "carol"}, {"Member_Account": "nobody"}])
        results = {m["Member_Account"]: m["Result"] for m in answer.get("MemberList", [])}
        report.check(results == {"bob": 1, "carol": 2, "nobody": 0}, "add_group_member: added, already a member, no such account", answer)
        info = tim.group_open_http_svc.get_group_info([group_id])
        entry = (info.get("GroupInfo") or [{}])[0]
        report.check(entry.get("MemberNum") == 3 and entry.get("Owner_Account") == "alice", "get_group_info has MemberNum and the owner", info)
        count = len(simulator.deliveries())
        answer = tim.group_open_http_svc.send_group_msg(group_id, [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "group hello"}}])
        report.check(answer.get("ActionStatus") == "OK" and isinstance(answer.get("MsgSeq"), int), "send_group_msg answers MsgSeq", answer)
        group_seq = answer.get("MsgSeq")
        found = simulator.wait_for(count + 1)
        report.check(len(found) == count + 1 and "group hello" in payload(found[-1]).get("aps", {}).get("alert", {}).get("body", ""),
                     "the group message is pushed to bob", found[count:])
        # timsdk picks send_group_msg's Random once per process (a default argument): a second, different message with the
        # same Random is a new message, not a repeat.
        answer = tim.group_open_http_svc.send_group_msg(group_id, [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "group again"}}])
        found = simulator.wait_for(count + 2)
        report.check(len(found) == count + 2 and "group again" in payload(found[-1]).get("aps", {}).get("alert", {}).get("body", ""),
                     "a second group message with the same Random is delivered too", [payload(d) for d in found[count:]])

        # Recall: the message leaves bob's inbox and offline count, and the phone that showed it gets the background push
        # that removes it (which Tencent does not send).
        def offline_count() -> int:
            _, answer = http("GET", f"{easemob}/users/bob/offline_msg_count", headers=app_headers)
            return int(answer.get("data", {}).get("bob", "-1"))

        def withdrawal_of(message_key: str, since: int) -> dict | None:
            for delivery in simulator.wait_for(since + 1)[since:]:
                recalled = payload(delivery).get("beacon", {}).get("recalled")
                if recalled == [message_key]:
                    return delivery
            return None

        unread = offline_count()
        count = len(simulator.deliveries())
        answer = tim.open_im.admin_msg_withdraw("bob", "carol", first_key)
        report.check(answer.get("ActionStatus") == "OK" and answer.get("ErrorCode") == 0, "admin_msgwithdraw", answer)
        report.check(offline_count() == unread - 1, "the withdrawn message leaves bob's offline count", (unread, offline_count()))
        delivery = withdrawal_of(first_key, count)
        report.check(delivery is not None and delivery.get("push_type") == "background" and "alert" not in payload(delivery).get("aps", {}),
                     "bob's phone gets the background push that removes the notification", simulator.deliveries()[count:])
        answer = tim.open_im.admin_msg_withdraw("bob", "carol", first_key)
        report.check(answer.get("ErrorCode") == 20022, "a message withdrawn already is 20022", answer)
        count = len(simulator.deliveries())
        answer = tim.group_open_http_svc.group_msg_recall(group_id, [{"MsgSeq": group_seq}, {"MsgSeq": 1}])
        report.check(answer.get("RecallRetList") == [{"MsgSeq": group_seq, "RetCode": 0}, {"MsgSeq": 1, "RetCode": 10030}],
                     "group_msg_recall answers each MsgSeq", answer)
        delivery = withdrawal_of(str(group_seq), count)
        report.check(delivery is not None and delivery.get("push_type") == "background",
                     "the recalled group message's notification is withdrawn too", simulator.deliveries()[count:])

        answer = tim.group_open_http_svc.get_joined_group_list("bob")
        report.check(answer.get("GroupIdList") == [{"GroupId": group_id}], "get_joined_group_list", answer)
        report.check(tim.group_open_http_svc.destroy_group(group_id).get("ErrorCode") == 0, "destroy_group")
        gone = tim.group_open_http_svc.get_group_info([group_id])
        report.check((gone.get("GroupInfo") or [{}])[0].get("ErrorCode") == 10010, "a destroyed group answers 10010", gone)

        # Profile: the nickname is the push's display name.
        answer = tim.profile.portrait_set("carol", [{"Tag": "Tag_Profile_IM_Nick", "Value": "Carol Nick"}])
        report.check(answer.get("ErrorCode") == 0, "portrait_set sets the nickname", answer)
        answer = tim.profile.portrait_get(["carol"], ["Tag_Profile_IM_Nick"])
        items = (answer.get("UserProfileItem") or [{}])[0].get("ProfileItem")
        report.check(items == [{"Tag": "Tag_Profile_IM_Nick", "Value": "Carol Nick"}], "portrait_get reads it back", answer)

        # Refusals with Tencent's codes, always HTTP 200.
        api = TLSSigAPIv2.TLSSigAPIv2(SDKAPPID, key)
        cases = [
            ("a UserSig that is not one", tim_client(beacon.port, key, sig="not-a-usersig"), 70003),
            ("an expired UserSig", tim_client(beacon.port, key, sig=api.gen_sig("administrator", -10)), 70001),
            ("a UserSig signed with another key", tim_client(beacon.port, secrets.token_hex(32)), 70009),
            ("a non-admin identifier", tim_client(beacon.port, key, identifier="carol"), 60010),
        ]
        for label, client, code in cases:
            answer = client.im_open_login_svc.account_check(["bob"])
            report.check(answer.get("ActionStatus") == "FAIL" and answer.get("ErrorCode") == code, f"{label} is refused with {code}", answer)
        status, answer = http("POST", f"http://127.0.0.1:{beacon.port}/v4/openim/sendmsg?sdkappid=1&identifier=administrator&usersig=x", {})
        report.check(status == 200 and answer.get("ErrorCode") == 70020, "an unknown SDKAppID is refused with 70020", answer)
        answer = post("openim/sendmsg", data={"To_Account": "nobody", "MsgRandom": 1, "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "x"}}]})
        report.check(answer.get("ErrorCode") == 20003, "a message to an account never imported is refused with 20003", answer)

        # Client login with a UserSig gives the same user token as a password; a wrong one is refused.
        status, answer = http("POST", f"{easemob}/token", {"grant_type": "usersig", "username": "carol", "usersig": api.gen_sig("carol")})
        token = answer.get("access_token")
        report.check(status == 200 and bool(token) and answer.get("user", {}).get("username") == "carol", "grant_type usersig gives a user token", answer)
        status, answer = http("GET", f"{easemob}/users/carol", headers={"Authorization": f"Bearer {token}"})
        report.check(status == 200 and answer.get("entities", [{}])[0].get("nickname") == "Carol Nick", "the token opens carol's account", answer)
        status, answer = http("POST", f"{easemob}/token", {"grant_type": "usersig", "username": "carol", "usersig": api.gen_sig("bob")})
        report.check(status == 400 and answer.get("error") == "invalid_grant", "another user's UserSig is refused", answer)
        status, answer = http("POST", f"{easemob}/token", {"grant_type": "usersig", "username": "administrator", "usersig": api.gen_sig("administrator")})
        report.check(status == 400 and answer.get("error") == "invalid_grant", "the administrator's UserSig opens no user login", answer)

        # The Easemob door sees the same user: bob's delivery records hold the pushes sent through /v4.
        status, answer = http("GET", f"{easemob}/push/deliveries?username=bob", headers=app_headers)
        ids = {str(e.get("message_id")) for e in answer.get("entities", [])}
        report.check(status == 200 and first_key in ids, "bob's deliveries (Easemob door) include the /v4 message", answer.get("entities", [])[:3])
        status, answer = http("GET", f"{easemob}/users/bob/push/binding", headers=app_headers)
        report.check(status == 200 and any(b.get("device_token") == BOB_TOKEN for b in answer.get("entities", [])), "bob's binding is the same", answer)
        answer = tim.im_open_login_svc.account_delete(["dave", "nobody"])
        codes = {item["UserID"]: item["ResultCode"] for item in answer.get("ResultItem", [])}
        report.check(codes == {"dave": 0, "nobody": 70107}, "account_delete", answer)
        status, _ = http("GET", f"{easemob}/users/dave", headers=app_headers)
        report.check(status == 404, "a deleted account is gone through the Easemob door too", status)
    finally:
        beacon.stop()
    print(f"{'FAILED' if report.failures else 'passed'}: {report.failures} failure(s)")
    return 1 if report.failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beacon", required=True)
    sys.exit(run(parser.parse_args().beacon))
