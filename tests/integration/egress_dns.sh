#!/usr/bin/env bash
# tests/integration/egress_dns.sh: the sandboxes' DNS. Allowed names only (NXDOMAIN
# otherwise, REFUSED for other types), TTL clamps, answers from the address the sandbox
# asked (IP_PKTINFO: the DNS listener is on port 53 here), UDP and TCP, and bypass items
# 4 (DNS rebinding, mixed answers) and 16 (exfiltration shapes; DoH/DoT names); and two
# sandboxes asking the same name get answers that do not depend on each other (the cache is
# partitioned: a hit in another sandbox's cache would give its age away in the TTL).
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
EW_DNS_PORT=53
ew_world dns --dns-min-ttl 1s --dns-max-ttl 300s

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: egress-dns-test
rules:
  - name: web
    hosts: [allowed.test, rebind.test, mixed.test, cname.test, shortttl.test, longttl.test]
    ports: [80]
    scheme: http
  - name: shared
    hosts: [shared.test, slow.test]
    ports: [80]
    scheme: http
  - name: tunnel-zone
    hosts: ["**.exfil.test"]
    ports: [80]
    scheme: http
YAML
python3 - "$EW_TMP/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["rebind.test"] = {"ttl": 1, "seq": [{"A": ["203.0.113.10"]}, {"A": ["10.0.0.5"]}, {"A": ["127.0.0.1"]},
                                      {"A": ["169.254.169.254"]}]}
z["mixed.test"] = {"A": ["10.0.0.7", "203.0.113.10", "127.0.0.1", "0.0.0.0"], "ttl": 30}
z["cname.test"] = {"cname": "edge.cdn.test", "A": ["203.0.113.10"], "ttl": 30}
z["shortttl.test"] = {"A": ["203.0.113.10"], "ttl": 0}
z["longttl.test"] = {"A": ["203.0.113.10"], "ttl": 86400}
z["x.exfil.test"] = {"A": ["203.0.113.10"], "TXT": ["hello"], "ttl": 30}
z["shared.test"] = {"A": ["203.0.113.10", "203.0.113.11"], "ttl": 120}
z["slow.test"] = {"A": ["203.0.113.10"], "ttl": 120, "delay": 1.5}
json.dump(z, open(sys.argv[1], "w"))
PY

ew_note "before the sandbox is registered"
ew_match "unknown source: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 allowed.test A
ew_audit_has "audited as a security event" type=security_event event=unknown_source src=/^10\\.200\\.1\\.2:/
ew_match "sandbox registered" "HTTP 201" ew_register sbx-dns 1 "$EW_TMP/policy.yaml"

ew_note "answers"
ew_match "allowed name: its address" "RCODE NOERROR ANSWERS 203.0.113.10 TTL 30" ew_dns 1 10.200.1.1 allowed.test A
ew_audit_has "audited" type=dns_query decision=allow qname=allowed.test qtype=A rcode=NOERROR rule=web 'answers=/203.0.113.10/'
ew_match "mixed case and a trailing dot are the same name" "RCODE NOERROR ANSWERS 203.0.113.10" ew_dns 1 10.200.1.1 AllOwed.TEST. A
ew_match "asked at any resolver address, answered from it (9.9.9.9:53)" "RCODE NOERROR ANSWERS 203.0.113.10" \
  ew_dns 1 9.9.9.9 allowed.test A
ew_match "over TCP too" "RCODE NOERROR ANSWERS 203.0.113.10" ew_dns 1 9.9.9.9 allowed.test A --tcp
ew_match "AAAA for a name with no IPv6: no records" "RCODE NOERROR ANSWERS - " ew_dns 1 10.200.1.1 allowed.test AAAA
ew_match "a name outside the policy: NXDOMAIN" "RCODE NXDOMAIN" ew_dns 1 10.200.1.1 evil.test A
ew_audit_has "audited" type=dns_query decision=deny qname=evil.test rcode=NXDOMAIN
ew_fail "and never asked upstream" grep -q 'QUERY evil.test' "$EW_TMP/dns.q"
ew_match "MX of an allowed name: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 allowed.test MX
ew_audit_has "audited" type=dns_query qname=allowed.test qtype=MX reason=unsupported_type
ew_match "a CNAME chain is flattened to the asked name" "RCODE NOERROR ANSWERS 203.0.113.10 " ew_dns 1 10.200.1.1 cname.test A
ew_match "TTL 0 is raised to the minimum" "TTL 1[[:space:]]*$" ew_dns 1 10.200.1.1 shortttl.test A
ew_match "a day is cut to the maximum" "TTL 300[[:space:]]*$" ew_dns 1 10.200.1.1 longttl.test A
ew_match "a malformed query: FORMERR" "RCODE FORMERR" ew_dns 1 10.200.1.1 x A --raw-hex 12340100000200000000000001610000010001
ew_match "an IP literal as a name: NXDOMAIN" "RCODE NXDOMAIN" ew_dns 1 10.200.1.1 203.0.113.10 A
ew_match "DoH/DoT provider names are not resolvable" "RCODE NXDOMAIN" ew_dns 1 10.200.1.1 dns.google A

ew_note "4: rebinding and mixed answers"
ew_match "first answer: public" "ANSWERS 203.0.113.10" ew_dns 1 10.200.1.1 rebind.test A
sleep 1.2
ew_match "then it rebinds to a private address: dropped" "RCODE NOERROR ANSWERS - " ew_dns 1 10.200.1.1 rebind.test A
ew_audit_has "the filtered answer is a security event" type=security_event event=dns_answer_filtered \
  qname=rebind.test 'detail=/10.0.0.5 \(private\)/'
sleep 1.2
ew_match "to loopback: dropped" "RCODE NOERROR ANSWERS - " ew_dns 1 10.200.1.1 rebind.test A
sleep 1.2
ew_match "to the metadata address: dropped" "RCODE NOERROR ANSWERS - " ew_dns 1 10.200.1.1 rebind.test A
ew_match "a connection to the rebound address is denied" '"reason":"(internal_address|destination_mismatch)"' \
  ew_curl 1 --resolve rebind.test:80:10.0.0.5 http://rebind.test/rebound
ew_match "the address checked first still works and is the one dialled" '"server": "good"' \
  ew_curl 1 --resolve rebind.test:80:203.0.113.10 http://rebind.test/pinned
ew_audit_has "dialled the checked address" type=http_request host=rebind.test dialled=203.0.113.10:80 decision=allow
ew_match "mixed answers: only the public one is handed out" "RCODE NOERROR ANSWERS 203.0.113.10 TTL" \
  ew_dns 1 10.200.1.1 mixed.test A
ew_audit_has "the others are named in a security event" type=security_event qname=mixed.test \
  'detail=/10.0.0.7.*127.0.0.1.*0.0.0.0/'

ew_note "16: exfiltration shapes"
ew_match "an allowed tunnel zone works for plain names" "RCODE NOERROR ANSWERS 203.0.113.10" ew_dns 1 10.200.1.1 x.exfil.test A
ew_match "a high-entropy label: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 mzxw6ytboi2dgnbvgy3tqojqmfrgcztg.exfil.test A
ew_audit_has "audited as a security event" type=security_event event=dns_exfiltration_shape reason=high_entropy_label
ew_match "a hex-encoded label: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 4f2a9c1be07d38564f2a9c1be07d3856.exfil.test A
ew_audit_has "audited" type=security_event reason=hex_encoded_label
ew_match "an over-long label: REFUSED" "RCODE REFUSED" \
  ew_dns 1 10.200.1.1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.exfil.test A
ew_audit_has "audited" type=security_event reason=label_too_long
long=$(printf 'abcdefgh%.0s.' $(seq 1 25))exfil.test
ew_match "an over-long name: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 "$long" A
ew_audit_has "audited" type=security_event reason=name_too_long
ew_match "non-hostname bytes: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 x A --name-hex 0361016205657866696c047465737400
ew_match "TXT to an unknown name: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 data.attacker.test TXT
ew_audit_has "audited" type=security_event reason=record_type_to_unknown_name qtype=TXT
ew_match "NULL to an unknown name: REFUSED" "RCODE REFUSED" ew_dns 1 10.200.1.1 data.attacker.test NULL
ew_match "TXT to an allowed name: REFUSED (only A/AAAA are answered)" "RCODE REFUSED" ew_dns 1 10.200.1.1 x.exfil.test TXT
ew_fail "no refused shape reached the upstream resolver" grep -Eq 'QUERY (mzxw|4f2a|aaaa|abcdefgh|data\.attacker)' "$EW_TMP/dns.q"

ew_note "a second sandbox is not the first"
ew_match "sandbox 2 unregistered: REFUSED" "RCODE REFUSED" ew_dns 2 10.200.2.1 allowed.test A

ew_note "5: what one sandbox resolved does not show in another's answers"
ew_match "sandbox 2 registered" "HTTP 201" ew_register sbx-dns2 2 "$EW_TMP/policy.yaml"
a1=$(ew_dns 1 10.200.1.1 shared.test A --hex)
ew_match "sandbox 1: a fresh answer" "RCODE NOERROR ANSWERS 203.0.113.10,203.0.113.11 TTL 120" echo "$a1"
ew_match "its second answer is its own cache's (a hit tells its age)" "TTL 1[01][0-9][[:space:]]" \
  ew_dns 1 10.200.1.1 shared.test A
a2=$(ew_dns 2 10.200.2.1 shared.test A --hex)
ew_eq "sandbox 2 afterwards: the very answer sandbox 1 got first, every field but the id" \
  "$(sed -n 's/^REPLY //p' <<<"$a2")" "$(sed -n 's/^REPLY //p' <<<"$a1")"
ew_match "... fresh from the upstream resolver, not from sandbox 1's cache" "TTL 120" echo "$a2"
ew_eq "the upstream was asked once per sandbox" "$(grep -c 'QUERY shared.test A' "$EW_TMP/dns.q")" 2
ew_audit_has "audited as not cached" type=dns_query qname=shared.test cached=false sandbox=sbx-dns2
# Two sandboxes asking a slow name at once: each question goes upstream on its own (one
# merged with the other's would come back sooner than its own and say the other asked).
ew_dns 1 10.200.1.1 slow.test A >"$EW_TMP/slow1" &
slow1=$!
ew_dns 2 10.200.2.1 slow.test A >"$EW_TMP/slow2"
wait "$slow1"
ew_match "both answered" "ANSWERS 203.0.113.10 TTL 120.*ANSWERS 203.0.113.10 TTL 120" cat "$EW_TMP/slow1" "$EW_TMP/slow2"
ew_eq "each asked upstream for itself" "$(grep -c 'QUERY slow.test A' "$EW_TMP/dns.q")" 2
ew_done
