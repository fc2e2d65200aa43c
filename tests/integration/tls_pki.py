"""Certificates for the HTTPS tests, made with the openssl command line: a test CA and leaves it
signs, and the pin of a leaf's public key that Chromium trusts without the CA.

    make_pki(d)      # d/ca.crt, d/localhost-ec.{crt,key}, d/localhost-rsa.{crt,key}, ...
    spki_pin(os.path.join(d, "localhost-ec.crt"))   # for --ignore-certificate-errors-spki-list
"""
import os
import subprocess


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
