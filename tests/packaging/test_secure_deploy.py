"""The secure deploy files: the compose `secure` profile, deploy/k8s/secure/ and the
certificate script both are fed from (docs/how-to/security.md).

Broker command lines are parsed by the broker's own flag parser (the mounted file paths
swapped for local files, since the parser checks they exist), and the shell snippets
that add the first super user are run with a stand-in `groupwire` that records how it
was called, so a misspelt flag or a password passed the wrong way fails here rather than
in a container. The certificates the script makes go through a real TLS handshake
between the broker's server context and the SDK's client context.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from groupwire import create_ssl_context
from groupwire.broker.config import BrokerSettings, parse_settings
from groupwire.broker.security.listeners import Listener
from groupwire.broker.security.tls import TlsFiles, principal_of, server_context

from .imagefiles import COMPOSE, ROOT, healthcheck_argv, image_argv, option

pytestmark = pytest.mark.packaging

SECURE_DIR = ROOT / "deploy" / "secure"
MAKE_CERTS = SECURE_DIR / "make-certs.sh"
SECURE_K8S = ROOT / "deploy" / "k8s" / "secure"
MOUNTED = "/etc/groupwire/"
"""Where the compose service and the pods find certificates and the admin password."""


def yaml_module() -> Any:
    return pytest.importorskip("yaml", reason="PyYAML comes with mkdocs (the dev extra)")


def needs_openssl() -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")


def local_files(argv: list[str], tmp_path: Path) -> list[str]:
    """``argv`` with every mounted path replaced by an (empty) file under ``tmp_path``."""
    out = []
    for arg in argv:
        if arg.startswith(MOUNTED):
            local = tmp_path / "mounted" / arg.removeprefix(MOUNTED)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.touch()
            arg = str(local)
        out.append(arg)
    return out


def broker_settings(argv: list[str], tmp_path: Path) -> BrokerSettings:
    assert argv[0] == "broker", argv
    return parse_settings(local_files(argv, tmp_path)[1:], environ={})


def listener(settings: BrokerSettings, protocol: str) -> Listener:
    (found,) = [item for item in settings.listener_list() if item.security_protocol == protocol]
    return found


def advertised(settings: BrokerSettings, protocol: str) -> Listener:
    (found,) = [item for item in settings.advertised_listener_list()
                if item.security_protocol == protocol]
    return found


def fake_groupwire(tmp_path: Path) -> tuple[Path, Path]:
    """A `groupwire` on PATH that appends ``{"argv", "stdin"}`` per call to a log (stdin
    only for `users`, which reads the password from it); `users` exits 3 when
    FAKE_USERS_FAILS is set. Returns (bin dir, log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    fake = bin_dir / "groupwire"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "argv = sys.argv[1:]\n"
        "stdin = sys.stdin.read() if argv[:1] == ['users'] else None\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': argv, 'stdin': stdin}) + '\\n')\n"
        "sys.exit(3 if argv[:1] == ['users'] and os.environ.get('FAKE_USERS_FAILS') else 0)\n")
    fake.chmod(0o755)
    return bin_dir, log


def run_with_fake(argv: list[str], tmp_path: Path, bin_dir: Path, *, fail_users: bool = False,
                  ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", **({"FAKE_USERS_FAILS": "1"} if fail_users else {})}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, check=False)


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def ignored_patterns(directory: Path) -> list[str]:
    lines = (directory / ".gitignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def is_ignored(directory: Path, relative: str) -> bool:
    """``relative`` (to ``directory``) is covered by its ``.gitignore``, in the two forms
    those files use: ``name`` and ``dir/``."""
    return any(relative == pattern or (pattern.endswith("/") and relative.startswith(pattern))
               for pattern in ignored_patterns(directory))


# --- docker-compose.yml: the `secure` profile -----------------------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml_module().safe_load(COMPOSE.read_text())
    return loaded


def secure_service() -> dict[str, Any]:
    service: dict[str, Any] = compose()["services"]["broker-secure"]
    return service


def uncompose(text: str) -> str:
    """Compose's interpolation of a value without variables: ``$$`` is a literal ``$``."""
    assert not re.search(r"(?<!\$)\$(?!\$)", text.replace("$$", "")), text
    return text.replace("$$", "$")


def test_secure_profile_is_one_broker_that_starts_only_when_asked() -> None:
    services = compose()["services"]
    profiled = {name for name, svc in services.items() if "secure" in svc.get("profiles", [])}
    assert profiled == {"broker-secure"}
    assert secure_service()["profiles"] == ["secure"]
    assert secure_service()["image"] == services["broker"]["image"]
    # The quick start's broker stays plaintext.
    assert "command" not in services["broker"] and "entrypoint" not in services["broker"]


def test_secure_broker_serves_sasl_ssl_with_acls(tmp_path: Path) -> None:
    service = secure_service()
    settings = broker_settings(service["command"], tmp_path)
    sasl_ssl, plain = listener(settings, "SASL_SSL"), listener(settings, "PLAINTEXT")
    assert [item.security_protocol for item in settings.listener_list()] == \
        ["SASL_SSL", "PLAINTEXT"]
    assert sasl_ssl.host == "0.0.0.0"
    assert plain.host == "127.0.0.1"  # the container's loopback: the healthcheck only
    assert settings.authorizer == "acl"
    assert settings.super_user_list() == ["User:admin"]
    assert settings.sasl_mechanisms() == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert str(settings.data_dir) == option(image_argv(), "--data-dir")
    assert str(settings.metrics_port) == option(image_argv(), "--metrics-port")
    # Clients on the host reach SASL_SSL through the port it is published on, by the
    # name the certificate is made for; the plaintext port is not published.
    assert f"{sasl_ssl.port}:{sasl_ssl.port}" in service["ports"]
    assert advertised(settings, "SASL_SSL").host == "localhost"
    assert advertised(settings, "SASL_SSL").port == sasl_ssl.port
    published = {str(p).rsplit(":", 1)[1] for p in service["ports"]}
    assert str(plain.port) not in published
    other_ports = {str(p).split(":")[0] for name, svc in compose()["services"].items()
                   if name != "broker-secure" for p in svc.get("ports", [])}
    assert not {str(p).split(":")[0] for p in service["ports"]} & other_ports
    assert "broker-secure-data" in compose()["volumes"]


def test_secure_broker_healthcheck_is_the_images_on_the_loopback_listener(
        tmp_path: Path) -> None:
    settings = broker_settings(secure_service()["command"], tmp_path)
    plain = listener(settings, "PLAINTEXT")
    _opts, image_health = healthcheck_argv()
    assert option(image_health, "--bootstrap") == f"127.0.0.1:{plain.port}"
    health = " ".join(secure_service()["healthcheck"]["test"])
    assert " ".join(image_health) in health, health


def test_secure_broker_reads_only_read_only_mounts_kept_out_of_git(tmp_path: Path) -> None:
    service = secure_service()
    binds = {v["target"]: v for v in service["volumes"] if isinstance(v, dict)}
    command = service["command"]
    for flag in ("--ssl-certfile", "--ssl-keyfile"):
        assert option(command, flag) in binds, flag
    assert "/etc/groupwire/admin-password" in binds
    assert "/etc/groupwire/admin-password" in " ".join(service["entrypoint"])
    for target, bind in binds.items():
        assert target.startswith(MOUNTED), target
        assert bind["type"] == "bind" and bind["read_only"] is True, target
        # A missing file stops the start instead of turning into an empty directory.
        assert bind["bind"]["create_host_path"] is False, target
        source = bind["source"].removeprefix("./")
        assert source.startswith("deploy/secure/"), source
        assert is_ignored(SECURE_DIR, source.removeprefix("deploy/secure/")), source
    # The CA's private key is not among them.
    assert not any("ca.key" in bind["source"] for bind in binds.values())


def _compose_entrypoint(tmp_path: Path) -> tuple[list[str], Path]:
    password = tmp_path / "admin-password"
    password.write_text("correct horse\n")
    entrypoint = [uncompose(part).replace("/etc/groupwire/admin-password", str(password))
                  for part in secure_service()["entrypoint"]]
    return entrypoint, password


def test_secure_entrypoint_adds_the_super_user_offline_then_runs_the_broker(
        tmp_path: Path) -> None:
    entrypoint, _password = _compose_entrypoint(tmp_path)
    command = secure_service()["command"]
    bin_dir, log = fake_groupwire(tmp_path)
    run = run_with_fake(entrypoint + command, tmp_path, bin_dir)
    assert run.returncode == 0, run.stderr
    users, broker = calls(log)
    data_dir = option(command, "--data-dir")
    assert users == {"argv": ["users", "add", "admin", "--data-dir", data_dir],
                     "stdin": "correct horse\n"}
    assert broker["argv"] == command
    super_users = option(command, "--super-users").split(";")
    assert f"User:{users['argv'][2]}" in super_users


def test_secure_entrypoint_does_not_start_the_broker_without_its_super_user(
        tmp_path: Path) -> None:
    entrypoint, _password = _compose_entrypoint(tmp_path)
    bin_dir, log = fake_groupwire(tmp_path)
    run = run_with_fake(entrypoint + secure_service()["command"], tmp_path, bin_dir,
                        fail_users=True)
    assert run.returncode == 3
    assert [c["argv"][0] for c in calls(log)] == ["users"]


# --- deploy/k8s/secure ------------------------------------------------------------------------


def kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml_module().safe_load(
        (SECURE_K8S / "kustomization.yaml").read_text())
    return loaded


def k8s_docs() -> list[dict[str, Any]]:
    yaml = yaml_module()
    docs: list[dict[str, Any]] = []
    for path in sorted(SECURE_K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = k8s_one("StatefulSet", "groupwire-secure")["spec"]["template"]["spec"]
    return spec


def broker_container() -> dict[str, Any]:
    (container,) = pod_spec()["containers"]
    return dict(container)


def generated_secrets() -> dict[str, dict[str, str]]:
    """Each generated Secret's name → {key: file}."""
    out: dict[str, dict[str, str]] = {}
    for gen in kustomization()["secretGenerator"]:
        out[gen["name"]] = dict(f.split("=", 1) for f in gen["files"])
    return out


def mounted_secret_file(container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) a file path inside ``container`` comes from."""
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for mount in container["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and "secret" in volumes[mount["name"]]:
            assert mount.get("readOnly") is True, mount
            return volumes[mount["name"]]["secret"]["secretName"], path.removeprefix(prefix)
    raise AssertionError(f"{path} is not in a mounted Secret")


def kubelet_expand(arg: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)),
                  arg)


def test_secure_kustomization_lists_every_manifest_and_both_secrets() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {p.name for p in SECURE_K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    secrets = generated_secrets()
    assert set(secrets) == {"groupwire-secure-tls", "groupwire-secure-admin"}
    # The pods name the Secrets as generated: no hash suffix to follow.
    assert kustomization()["generatorOptions"]["disableNameSuffixHash"] is True
    for files in secrets.values():
        for source in files.values():
            assert is_ignored(SECURE_K8S, source), source


def test_secure_manifests_are_their_own_objects() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in k8s_docs())
    assert kinds == [("Service", "groupwire-secure"), ("Service", "groupwire-secure-headless"),
                     ("StatefulSet", "groupwire-secure")]
    labels = k8s_one("StatefulSet", "groupwire-secure")["spec"]["template"]["metadata"]["labels"]
    # The plaintext broker's Service (deploy/k8s) must not select these pods.
    base = yaml_module().safe_load_all((ROOT / "deploy" / "k8s" / "service.yaml").read_text())
    for service in base:
        assert not service["spec"]["selector"].items() <= labels.items()
    for name in ("groupwire-secure", "groupwire-secure-headless"):
        assert k8s_one("Service", name)["spec"]["selector"] == labels


def test_secure_broker_pod_serves_sasl_ssl_through_the_service(tmp_path: Path) -> None:
    container = broker_container()
    assert "command" not in container  # the image's entrypoint: groupwire
    args = [kubelet_expand(a, {"POD_NAMESPACE": "ns"}) for a in container["args"]]
    settings = broker_settings(args, tmp_path)
    sasl_ssl, plain = listener(settings, "SASL_SSL"), listener(settings, "PLAINTEXT")
    assert sasl_ssl.host == "0.0.0.0" and plain.host == "127.0.0.1"
    assert settings.authorizer == "acl"
    assert str(settings.data_dir) == option(image_argv(), "--data-dir")
    assert str(settings.metrics_port) == option(image_argv(), "--metrics-port")
    service = k8s_one("Service", "groupwire-secure")
    assert advertised(settings, "SASL_SSL").host == f"{service['metadata']['name']}.ns.svc"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["sasl-ssl"] == sasl_ssl.port == advertised(settings, "SASL_SSL").port
    by_target = {p["targetPort"]: p["port"] for p in service["spec"]["ports"]}
    assert by_target["sasl-ssl"] == sasl_ssl.port
    assert plain.port not in ports.values()
    assert plain.port not in {p["port"] for p in service["spec"]["ports"]}


def test_secure_broker_probes_are_the_images_on_the_loopback_listener(tmp_path: Path) -> None:
    container = broker_container()
    settings = broker_settings(
        [kubelet_expand(a, {"POD_NAMESPACE": "ns"}) for a in container["args"]], tmp_path)
    _opts, health = healthcheck_argv()
    assert option(health, "--bootstrap") == f"127.0.0.1:{listener(settings, 'PLAINTEXT').port}"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == health, probe


def test_secure_broker_reads_its_certificate_from_the_tls_secret() -> None:
    container = broker_container()
    tls = generated_secrets()["groupwire-secure-tls"]
    for flag, key in (("--ssl-certfile", "tls.crt"), ("--ssl-keyfile", "tls.key")):
        assert mounted_secret_file(container, option(container["args"], flag)) == \
            ("groupwire-secure-tls", key)
        assert key in tls
    gen = next(g for g in kustomization()["secretGenerator"]
               if g["name"] == "groupwire-secure-tls")
    assert gen["type"] == "kubernetes.io/tls"
    # Secrets readable by the pod's group only.
    for volume in pod_spec()["volumes"]:
        if "secret" in volume:
            assert volume["secret"]["defaultMode"] == 0o440, volume
    assert pod_spec()["securityContext"]["fsGroup"] == pod_spec()["securityContext"]["runAsGroup"]


def test_secure_init_container_adds_the_super_user_offline(tmp_path: Path) -> None:
    (init,) = pod_spec()["initContainers"]
    assert init["image"] == broker_container()["image"]
    script = init["command"]
    assert script[:2] == ["sh", "-c"]
    read = re.search(r"<\s*(\S+)", script[2])
    assert read is not None, "the password must come in on stdin"
    assert mounted_secret_file(init, read.group(1)) == ("groupwire-secure-admin", "password")
    assert "password" in generated_secrets()["groupwire-secure-admin"]
    password = tmp_path / "password"
    password.write_text("correct horse\n")
    bin_dir, log = fake_groupwire(tmp_path)
    run = run_with_fake([*script[:2], script[2].replace(read.group(1), str(password))],
                        tmp_path, bin_dir)
    assert run.returncode == 0, run.stderr
    (call,) = calls(log)
    args = broker_container()["args"]
    data_dir = option(args, "--data-dir")
    assert call == {"argv": ["users", "add", "admin", "--data-dir", data_dir],
                    "stdin": "correct horse\n"}
    assert f"User:{call['argv'][2]}" in option(args, "--super-users").split(";")
    # Into the broker's own data volume.
    data_mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    broker_mounts = {m["mountPath"]: m["name"] for m in broker_container()["volumeMounts"]}
    assert data_mounts[data_dir] == broker_mounts[data_dir] == "data"
    assert init["securityContext"] == broker_container()["securityContext"]


def test_secure_kustomization_builds_with_certificates_from_the_script(tmp_path: Path) -> None:
    needs_openssl()
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    work = tmp_path / "secure"
    shutil.copytree(SECURE_K8S, work)
    subprocess.run(["sh", str(MAKE_CERTS), str(work / "certs"), "groupwire-secure.ns.svc"],
                   check=True, capture_output=True, timeout=60)
    (work / "admin-password").write_text("correct horse\n")
    built = subprocess.run([kubectl, "kustomize", str(work)], check=True, capture_output=True,
                           text=True, timeout=60).stdout
    docs = [d for d in yaml_module().safe_load_all(built) if d]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    assert secrets["groupwire-secure-tls"]["type"] == "kubernetes.io/tls"
    assert set(secrets["groupwire-secure-tls"]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert set(secrets["groupwire-secure-admin"]["data"]) == {"password"}
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert sts["metadata"]["labels"]["app.kubernetes.io/part-of"] == "groupwire"


# --- deploy/secure/make-certs.sh --------------------------------------------------------------


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str,
               ) -> ssl.SSLObject:
    """A TLS handshake in memory; returns the server's end (for the peer certificate)."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, end in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return s
    raise AssertionError("the handshake did not finish")


def _strict(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # Python 3.13's default
    return ctx


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_openssl()
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", str(MAKE_CERTS), "-c", "carol", str(out), "localhost", "127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return out


def test_make_certs_gives_a_broker_certificate_clients_verify_strictly(certs: Path) -> None:
    server = server_context(TlsFiles(str(certs / "broker.crt"), str(certs / "broker.key")))
    client = _strict(create_ssl_context(cafile=certs / "ca.crt"))
    for hostname in ("localhost", "127.0.0.1"):
        assert _handshake(client, server, hostname).version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _handshake(client, server, "elsewhere.example")
    for key in ("ca.key", "broker.key", "carol.key"):
        assert (certs / key).stat().st_mode & 0o077 == 0, key


def test_make_certs_client_certificate_names_the_principal(certs: Path) -> None:
    server = server_context(TlsFiles(str(certs / "broker.crt"), str(certs / "broker.key"),
                                     cafile=str(certs / "ca.crt"), client_auth="required"))
    client = _strict(create_ssl_context(cafile=certs / "ca.crt", certfile=certs / "carol.crt",
                                        keyfile=certs / "carol.key"))
    served = _handshake(client, server, "localhost")
    assert principal_of(served.getpeercert()) == "User:carol"


def test_make_certs_keeps_the_ca_and_renews_the_broker_certificate(certs: Path,
                                                                     tmp_path: Path) -> None:
    work = tmp_path / "again"
    shutil.copytree(certs, work)
    before = {name: (work / name).read_bytes() for name in ("ca.crt", "broker.crt")}
    subprocess.run(["sh", str(MAKE_CERTS), str(work), "localhost"], check=True,
                   capture_output=True, timeout=60)
    assert (work / "ca.crt").read_bytes() == before["ca.crt"]
    assert (work / "broker.crt").read_bytes() != before["broker.crt"]
    server = server_context(TlsFiles(str(work / "broker.crt"), str(work / "broker.key")))
    # A client that trusted the CA before trusts the renewed certificate.
    _handshake(_strict(create_ssl_context(cafile=certs / "ca.crt")), server, "localhost")


def test_make_certs_refuses_bad_arguments(tmp_path: Path) -> None:
    needs_openssl()
    for argv in ([str(tmp_path / "x")], ["-c", "ca", str(tmp_path / "y"), "localhost"]):
        run = subprocess.run(["sh", str(MAKE_CERTS), *argv], capture_output=True, text=True,
                             timeout=60, check=False)
        assert run.returncode == 2, run
        assert "usage" in run.stderr or "-c ca:" in run.stderr, run.stderr
