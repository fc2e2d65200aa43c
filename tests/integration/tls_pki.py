"""Certificates for the HTTPS tests, made with the openssl command line: a test CA and leaves it
signs, and the pin of a leaf's public key that Chromium trusts without the CA.

    make_pki(d)      # d/ca.crt, d/localhost-ec.{crt,key}, d/localhost-rsa.{crt,key}, ...
    spki_pin(os.path.join(d, "localhost-ec.crt"))   # for --ignore-certificate-errors-spki-list
"""
import os
import subprocess
import time


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    """A CA, and leaves signed by it: localhost (EC P-256 and RSA 2048) and other.test (EC)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=ringd test CA", "-days", "2",
            cwd=d)
    for name, kind, sans in [("localhost-ec", "ec", "DNS:localhost,IP:127.0.0.1"),
                             ("localhost-rsa", "rsa", "DNS:localhost,IP:127.0.0.1"),
                             ("other-ec", "ec", "DNS:other.test")]:
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ec" else \
              ["-newkey", "rsa:2048"]
        cn = sans.split(",")[0][4:]
        openssl("req", "-new", *key, "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
                "-subj", "/CN=" + cn, cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=%s\n" % sans)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".crt",
                cwd=d)


def spki_pin(cert):
    """base64(sha256(SubjectPublicKeyInfo)) of the certificate in PEM file `cert`: the pin
    Chromium's --ignore-certificate-errors-spki-list takes."""
    out = subprocess.run(["bash", "-c", "set -o pipefail; openssl x509 -pubkey -noout -in \"$0\" |"
                          " openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64",
                          cert], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()


_CA_CONFIG = """[ca]
default_ca = test
[test]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[any]
commonName = supplied
"""


def issue(d, name, seconds, sans="DNS:localhost,IP:127.0.0.1", starts_in=0):
    """A leaf (EC P-256) valid for `seconds` from now (from `starts_in` seconds ahead, when
    given; else from a minute ago), signed by make_pki's CA with `openssl ca`,
    so that the CA's index (d/index.txt) knows it and `openssl ocsp` can answer for it. Writes
    d/name.key, d/name.crt and d/name-chain.crt (the leaf, then the CA: what stapling needs)."""
    if not os.path.exists(os.path.join(d, "ca.cnf")):
        with open(os.path.join(d, "ca.cnf"), "w") as f:
            f.write(_CA_CONFIG)
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "serial"), "w") as f:
            f.write("1000\n")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=" + sans, cwd=d)
    stamp = lambda t: time.strftime("%y%m%d%H%M%SZ", time.gmtime(t))
    now = time.time()
    openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key",
            "-in", name + ".csr", "-out", name + ".crt", "-notext",
            "-startdate", stamp(now + starts_in if starts_in else now - 60),
            "-enddate", stamp(now + seconds), cwd=d)
    with open(os.path.join(d, name + "-chain.crt"), "w") as out:
        for part in (name + ".crt", "ca.crt"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())


def ocsp_response(d, name, out):
    """The CA's OCSP response (DER) about d/name.crt, as its index says (good, unless revoked),
    written to d/out: what an operator fetches with `openssl ocsp ... -respout`."""
    openssl("ocsp", "-issuer", "ca.crt", "-cert", name + ".crt", "-no_nonce",
            "-reqout", name + ".ocsp-req", cwd=d)
    openssl("ocsp", "-index", "index.txt", "-rsigner", "ca.crt", "-rkey", "ca.key", "-CA", "ca.crt",
            "-reqin", name + ".ocsp-req", "-respout", out, "-ndays", "1", cwd=d)


def revoke(d, name):
    """Marks d/name.crt revoked in the CA's index."""
    openssl("ca", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key",
            "-revoke", name + ".crt", cwd=d)


def stale_ocsp_response(d, name, out):
    """Like ocsp_response, but out of date: its nextUpdate passed an hour ago. `openssl ocsp`
    stamps the time it runs, so this one is signed with Python's cryptography (the caller skips
    where it is not installed)."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509 import ocsp

    def load(n):
        with open(os.path.join(d, n), "rb") as f:
            return f.read()

    cert = x509.load_pem_x509_certificate(load(name + ".crt"))
    ca = x509.load_pem_x509_certificate(load("ca.crt"))
    ca_key = serialization.load_pem_private_key(load("ca.key"), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    response = (ocsp.OCSPResponseBuilder()
                .add_response(cert=cert, issuer=ca, algorithm=hashes.SHA1(),
                              cert_status=ocsp.OCSPCertStatus.GOOD,
                              this_update=now - datetime.timedelta(days=2),
                              next_update=now - datetime.timedelta(hours=1),
                              revocation_time=None, revocation_reason=None)
                .responder_id(ocsp.OCSPResponderEncoding.HASH, ca)
                .sign(ca_key, hashes.SHA256()))
    with open(os.path.join(d, out), "wb") as f:
        f.write(response.public_bytes(serialization.Encoding.DER))
