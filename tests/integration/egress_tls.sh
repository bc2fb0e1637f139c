#!/usr/bin/env bash
# tests/integration/egress_tls.sh: TLS passthrough on SNI, and the bypass-list items that do
# not need interception: 2 (allowed destination, other SNI), 3 (forged destination),
# 16 (DNS over TLS/HTTPS to public resolvers), 18 (ECH, missing SNI, IP as SNI), raw TCP,
# and that rules that need interception are handed to it (part 2).
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world tls

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: egress-tls-test
rules:
  - name: allowed-tls
    hosts: [allowed.test]
  - name: other-tls
    hosts: [other.test]
  - name: needs-inspection
    hosts: [api.allowed.test]
    paths: ["/v1/**"]
  - name: banner
    cidrs: [203.0.113.12/32]
    ports: [22]
    scheme: tcp
  - name: by-address
    cidrs: [203.0.113.12/32]
    ports: [8443]
YAML
ew_bg tls8443 ip netns exec "$(ew_ns up)" python3 "$EW_TOOL" tls-server 203.0.113.12 8443 \
  --cert "$EW_TMP/up.pem" --key "$EW_TMP/up.key" --name tls8443 --log "$EW_TMP/up.req"
ew_wait_line tls8443 LISTEN || exit 1
ew_match "sandbox registered" "HTTP 201" ew_register sbx-tls 1 "$EW_TMP/policy.yaml"

ew_note "passthrough"
ew_match "HTTPS to an allowed name, certificate verified end to end (not intercepted)" '"server": "tls"' \
  ew_curl 1 --cacert "$EW_TMP/ca.pem" https://allowed.test/secure
ew_ok "the upstream saw the SNI" ew_upstream_saw 'TLS tls sni=allowed.test'
ew_audit_has "connection audited with rule, SNI and dialled address" type=connection decision=allow \
  rule=allowed-tls sni=allowed.test dialled=203.0.113.10:443 proto=tls
ew_audit_has "its end audited with bytes both ways" type=connection_end 'bytes_up=/^[1-9]/' 'bytes_down=/^[1-9]/'
ew_match "a ClientHello split over 1-byte TCP segments still parses" SERVERHELLO \
  ew_hello 1 203.0.113.10 443 --sni allowed.test --slow 0.002
ew_match "a ClientHello split over many TLS records still parses" SERVERHELLO \
  ew_hello 1 203.0.113.10 443 --sni allowed.test --record-size 7
ew_match "ALPN is recorded" SERVERHELLO ew_hello 1 203.0.113.10 443 --sni allowed.test --alpn h2,http/1.1
ew_audit_has "ALPN in the record" type=connection decision=allow 'alpn=/h2/'

ew_note "names and destinations"
ew_match "SNI outside the policy: reset" RESET ew_hello 1 203.0.113.10 443 --sni evil.test
ew_audit_has "audited" type=connection decision=deny sni=evil.test reason=no_rule_matched
ew_match "2: an allowed name's address, then another allowed SNI (other.test is 203.0.113.11): reset" RESET \
  ew_hello 1 203.0.113.10 443 --sni other.test
ew_audit_has "audited as destination_mismatch" type=connection decision=deny reason=destination_mismatch \
  rule=other-tls sni=other.test dst=203.0.113.10:443
ew_match "2: the same with the sandbox having resolved other.test first" "RCODE NOERROR ANSWERS 203.0.113.11" \
  ew_dns 1 10.200.1.1 other.test A
ew_match "still reset" RESET ew_hello 1 203.0.113.10 443 --sni other.test
ew_eq "both audited as destination_mismatch" \
  "$(ew_audit type=connection decision=deny reason=destination_mismatch sni=other.test dst=203.0.113.10:443 | wc -l)" 2
ew_fail "3: forged destination (curl --resolve allowed.test to another address)" \
  ew_curl 1 --cacert "$EW_TMP/ca.pem" --resolve allowed.test:443:203.0.113.11 https://allowed.test/forged
ew_audit_has "audited as destination_mismatch" type=connection decision=deny reason=destination_mismatch \
  sni=allowed.test dst=203.0.113.11:443
ew_match "internal destination with an allowed SNI: reset" RESET ew_hello 1 10.0.0.5 443 --sni allowed.test
ew_audit_has "audited" type=connection decision=deny dst=10.0.0.5:443 'reason=/internal_address|destination_mismatch/'
ew_match "the proxy's own address with an allowed SNI: reset" RESET ew_hello 1 10.200.1.1 443 --sni allowed.test

ew_note "18: ECH, missing SNI, IP as SNI"
ew_match "Encrypted Client Hello: reset" RESET ew_hello 1 203.0.113.10 443 --sni allowed.test --ech
ew_audit_has "audited" type=connection decision=deny reason=ech_present
ew_match "no SNI: reset" RESET ew_hello 1 203.0.113.10 443 --no-sni
ew_audit_has "audited" type=connection decision=deny reason=sni_missing
ew_match "an IP address as SNI: reset" RESET ew_hello 1 203.0.113.10 443 --sni 203.0.113.10
ew_audit_has "audited" type=connection decision=deny reason=sni_is_ip_literal
ew_match "malformed ClientHello: reset" RESET ew_hello 1 203.0.113.10 443 --garbage
ew_audit_has "audited" type=connection decision=deny reason=malformed_clienthello

ew_note "16: DNS over TLS / HTTPS to public resolvers"
ew_match "DoT to 1.1.1.1:853: reset" RESET ew_hello 1 1.1.1.1 853 --sni cloudflare-dns.com
ew_fail "DoH to dns.google: refused" ew_curl 1 --resolve dns.google:443:8.8.8.8 https://dns.google/dns-query
ew_audit_has "DoH attempt audited" type=connection decision=deny sni=dns.google

ew_note "rules that need interception are intercepted (tests/integration/intercept_*.sh go further)"
ew_match "a path rule over TLS: the proxy itself answers the hello (the sandbox CA's leaf)" SERVERHELLO \
  ew_hello 1 203.0.113.10 443 --sni api.allowed.test
ew_audit_has "audited as inspected" type=connection decision=allow rule=needs-inspection inspected=true

ew_note "an address rule (cidrs, TLS passthrough)"
ew_match "TLS without SNI to an address a CIDR rule opens" SERVERHELLO ew_hello 1 203.0.113.12 8443 --no-sni
ew_audit_has "allowed by the address rule, dialled as asked" type=connection decision=allow rule=by-address \
  dialled=203.0.113.12:8443
ew_match "a name in the SNI is decided by name rules (none matches)" RESET \
  ew_hello 1 203.0.113.12 8443 --sni build-cache.internal
ew_match "the same address on another port is not opened" RESET ew_hello 1 203.0.113.12 8444 --no-sni

ew_note "raw TCP"
ew_match "neither TLS nor HTTP to an allowed host's address: reset" 'END reset' \
  ew_raw 1 203.0.113.10 443 'SSH-2.0-OpenSSH_9.2\r\n'
ew_audit_has "audited" type=connection decision=deny reason=unrecognised_protocol proto=tcp
ew_match "a CIDR rule opens raw TCP, server speaks first" '^BANNER' ew_raw 1 203.0.113.12 22 '' --timeout 10 --until 'BANNER\n'
ew_audit_has "audited" type=connection decision=allow rule=banner proto=tcp dialled=203.0.113.12:22
ew_match "the raw tunnel carries bytes both ways" 'BANNER.*hello-raw' ew_raw 1 203.0.113.12 22 'hello-raw' --timeout 10 --until hello-raw
ew_match "another port of that address stays closed" 'END reset' ew_raw 1 203.0.113.12 2222 'x' --timeout 1

ew_fail "nothing denied reached an upstream" ew_upstream_saw 'sni=(evil|other|203)'
ew_done
