"""The client properties file reads Kafka/librdkafka keys in java.util.Properties syntax, refuses unsafe or misspelt security settings with the key named, and never shows the password."""

import pytest

from raftlog.base.client_properties import ClientSecurity, load_properties, parse_properties
from raftlog.base.errors import InvalidConfigError
from raftlog.base.sasl import PlainClient, ScramClient

PASSWORD = "s3cr3t-Pa55word-for-tests"

GENERATED = f"""# written by raftlog cluster up --secure
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=admin
sasl.password={PASSWORD}
ssl.ca.location=/data/tls/ca.pem
"""


def test_the_generated_file_reads_back():
    security = ClientSecurity.from_properties(parse_properties(GENERATED))
    assert security.tls and security.sasl
    assert (security.mechanism, security.username, security.password) == ("SCRAM-SHA-512", "admin", PASSWORD)
    assert security.ca_location == "/data/tls/ca.pem" and security.check_hostname
    assert isinstance(security.sasl_client(), ScramClient)
    assert ClientSecurity.from_properties(security.to_properties()) == security


def test_java_properties_syntax():
    text = (
        "! bang comment\n"
        "   # indented comment\n"
        "a = 1\n"
        "b:2\n"
        "c 3\n"
        "d=  spaced value  \n"
        "e=line one \\\n"
        "    continued\n"
        "f=tab\\there \\u0041\n"
        "g\\=key=with equals\n"
        "h=\n"
        "a=last wins\n"
        "i=back\\\\slash\\\\\n"
    )
    assert parse_properties(text) == {
        "a": "last wins", "b": "2", "c": "3", "d": "spaced value  ", "e": "line one continued",
        "f": "tab\there A", "g=key": "with equals", "h": "", "i": "back\\slash\\",
    }


def test_defaults_to_plaintext_and_keeps_other_keys():
    security = ClientSecurity.from_properties({"client.id": "x", "bootstrap.servers": "h:1"})
    assert security.protocol == "PLAINTEXT" and not security.tls and not security.sasl
    assert security.ssl_context() is None and security.sasl_client() is None
    assert dict(security.other) == {"client.id": "x", "bootstrap.servers": "h:1"}


def test_names_are_case_insensitive_and_librdkafka_plural_works():
    security = ClientSecurity.from_properties(
        {"security.protocol": "sasl_ssl", "sasl.mechanisms": "plain", "sasl.username": "u", "sasl.password": "p"}
    )
    assert security.mechanism == "PLAIN" and isinstance(security.sasl_client(), PlainClient)


def test_java_jaas_and_pem_truststore():
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            f'username="alice" password="{PASSWORD}";',
        "ssl.truststore.location": "/ca.pem",
        "ssl.truststore.type": "PEM",
    })  # fmt: skip
    assert (security.username, security.password, security.ca_location) == ("alice", PASSWORD, "/ca.pem")
    with pytest.raises(InvalidConfigError, match="PEM"):
        ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"})


@pytest.mark.parametrize(
    "props, key",
    [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "p"}, "sasl.username"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u"}, "sasl.password"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PASSWORD}, "sasl.mechanism"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "ssl.key.location"),
        ({"security.protocol": "SSL", "ssl.ca.locaton": "/typo.pem"}, "ssl.ca.locaton"),
        ({"sasl.pasword": PASSWORD}, "sasl.pasword"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm"),
    ],
)
def test_bad_settings_name_the_key_and_never_the_password(props, key):
    with pytest.raises(InvalidConfigError) as info:
        ClientSecurity.from_properties(props)
    assert info.value.details["key"] == key
    assert PASSWORD not in str(info.value)


def test_plain_over_plaintext_is_refused_but_scram_is_allowed():
    scram = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"}
    assert ClientSecurity.from_properties(scram).sasl


def test_repr_hides_secrets():
    security = ClientSecurity.from_properties(parse_properties(GENERATED + "ssl.key.password=keypw-hidden\n"
                                                               "ssl.certificate.location=/c\nssl.key.location=/k\n"))
    assert PASSWORD not in repr(security) and "keypw-hidden" not in repr(security)
    assert "<hidden>" in repr(security)


def test_load_properties_errors(tmp_path):
    with pytest.raises(InvalidConfigError, match="cannot read"):
        load_properties(tmp_path / "missing.properties")
    big = tmp_path / "big.properties"
    big.write_bytes(b"a=" + b"x" * 70_000)
    with pytest.raises(InvalidConfigError, match="over"):
        load_properties(big)
    binary = tmp_path / "bin.properties"
    binary.write_bytes(b"a=\xff\xfe")
    with pytest.raises(InvalidConfigError, match="UTF-8"):
        load_properties(binary)
    good = tmp_path / "client.properties"
    good.write_text(GENERATED)
    assert ClientSecurity.from_file(good).username == "admin"


def test_ssl_context_errors_name_no_secret(tmp_path):
    security = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "nope.pem")})
    with pytest.raises(InvalidConfigError, match="TLS files"):
        security.ssl_context()
