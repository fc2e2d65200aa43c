"""The TLS scenarios' shared parts: one certificate for every server of a run, made with the
openssl command line into the run's folder, and what one core encrypts (`openssl speed -evp
aes-128-gcm`, 16 KiB blocks) measured in the same run: the limit of user-space TLS for bodies.

    files = make_certificate(os.path.join(outdir, "tls"))   # TlsFiles(cert, key, pem)
    bytes_per_s, cmd = aes_gcm_speed("1", seconds=2)
    remove_keys(os.path.join(outdir, "tls"))                 # a results folder carries no key

ECDSA P-256, valid two days, for localhost and 127.0.0.1 (the load generator sends SNI localhost
and checks nothing: it is self-signed). Key exchange is X25519 because the client offers only
that group (perf/loadgen_tls.h).
"""
import os
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class TlsFiles:
    cert: str  # PEM certificate
    key: str   # PEM private key (ECDSA P-256)
    pem: str   # certificate then key in one file (HAProxy's `crt`)


CERT_ARGS = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
# How the report names the certificate (no paths).
CERT_DESCRIPTION = "ECDSA P-256, self-signed, one for every server: openssl " + " ".join(CERT_ARGS)
SPEED_BLOCK = 16384


def make_certificate(folder, openssl="openssl"):
    """Writes cert.pem, key.pem and haproxy.pem into folder; returns their paths."""
    os.makedirs(folder, exist_ok=True)
    files = TlsFiles(os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem"),
                     os.path.join(folder, "haproxy.pem"))
    subprocess.run([openssl] + CERT_ARGS + ["-keyout", files.key, "-out", files.cert], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(files.cert) as c, open(files.key) as k, open(files.pem, "w") as pem:
        pem.write(c.read() + k.read())
    # Every server reads the key as the user it starts as; the harness runs them all as root.
    os.chmod(files.key, 0o600)
    os.chmod(files.pem, 0o600)
    return files


def remove_keys(folder):
    """Deletes the private keys (key.pem, haproxy.pem); the certificate stays."""
    for name in ("key.pem", "haproxy.pem"):
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            pass


def speed_command(cpus, seconds):
    return ["taskset", "-c", cpus, "openssl", "speed", "-evp", "aes-128-gcm", "-bytes", str(SPEED_BLOCK),
            "-seconds", str(seconds), "-mr"]


def parse_speed(text, block=SPEED_BLOCK):
    """Bytes per second from `openssl speed -mr` output for one block size: its `+F:` line is
    `+F:<n>:<algorithm>:<bytes/s for each size>`, its `+H:` line the sizes. None when absent."""
    sizes, rate = None, None
    for line in (text or "").splitlines():
        parts = line.strip().split(":")
        if parts[0] == "+H":
            sizes = parts[1:]
        elif parts[0] == "+F" and len(parts) >= 4:
            rate = parts[3:]
    if not sizes or not rate or len(sizes) != len(rate) or str(block) not in sizes:
        return None
    try:
        value = float(rate[sizes.index(str(block))])
    except ValueError:
        return None
    return value if value > 0 else None


def aes_gcm_speed(cpus, seconds):
    """One core's AES-128-GCM encryption in bytes per second of its CPU time (16 KiB blocks,
    the size of a full TLS record), pinned where the servers run; (None, cmd) when openssl
    cannot say."""
    cmd = speed_command(cpus, seconds)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None, cmd
    return parse_speed(out), cmd
