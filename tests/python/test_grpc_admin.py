"""Admin interop: a stock gRPC client (grpc-python) lists and calls the services of a running sim.

No `.proto` files and no `:authority` override: the channel target is `unix:<socket>` exactly as
an admin would type it, so grpc-core sends its percent-encoded path as `:authority`, and every
message class below is built from what server reflection returned.
"""

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from conftest import wait_for

HEALTH = "grpc.health.v1.Health"

# Socket -> the svcOS services that socket must list (besides health and reflection).
EXPECTED = {
    "hw-agent": {"svcos.hwagent.v1.HwAgentService", "svcos.hwagent.v1.HwDiagnosticsService"},
    "stratum-agent": {"svcos.stratum.v1.StratumService"},
    "auth": {"svcos.auth.v1.AuthService"},
    "tuner": {
        "svcos.tuner.v1.TunerService",
        "svcos.tuner.v1.PowerService",
        "svcos.tuner.v1.HistoryService",
    },
    "supervisor": {"svcos.supervisor.v1.SupervisorService", "svcos.supervisor.v1.UpdateService"},
    "legacy-tcp": set(),
    "gateway": {"svcos.config.v1.ConfigService"},
    "proxy": set(),
    # The sim's own processes.
    "hw-sim": {"svcos.hwsim.v1.HwSimService"},
    "test-pool": {"svcos.testpool.v1.TestPoolService"},
}


def channel(sim, service: str) -> grpc.Channel:
    return grpc.insecure_channel(f"unix:{sim.dir / 'run' / (service + '.sock')}")


class Reflected:
    """Calls built from server reflection alone."""

    def __init__(self, ch: grpc.Channel):
        self.ch = ch
        self.db = ProtoReflectionDescriptorDatabase(ch)
        self.pool = descriptor_pool.DescriptorPool(self.db)

    def services(self) -> set:
        return set(self.db.get_services())

    def call(self, grpc_service: str, method: str, **fields):
        svc = self.pool.FindServiceByName(grpc_service)
        m = svc.FindMethodByName(method)
        request_cls = message_factory.GetMessageClass(m.input_type)
        response_cls = message_factory.GetMessageClass(m.output_type)
        stub = self.ch.unary_unary(
            f"/{grpc_service}/{method}",
            request_serializer=lambda msg: msg.SerializeToString(),
            response_deserializer=response_cls.FromString,
        )
        return stub(request_cls(**fields), timeout=10)


def test_every_socket_lists_its_services_by_reflection(sim):
    for service, expected in EXPECTED.items():
        with channel(sim, service) as ch:
            listed = wait_for(
                lambda: Reflected(ch).services(), 30, f"reflection on {service}.sock"
            )
            assert HEALTH in listed, (service, listed)
            assert expected <= listed, (service, listed)
            # Only what this process serves: no other process's services.
            others = set().union(*(v for k, v in EXPECTED.items() if k != service))
            assert not (listed & others), (service, listed)


def test_health_and_service_methods_answer_without_an_authority_override(sim):
    for service in EXPECTED:
        with channel(sim, service) as ch:
            r = Reflected(ch)
            status = r.call(HEALTH, "Check", service="")
            # SERVING = 1 in grpc.health.v1.
            assert status.status == 1, (service, status)

    with channel(sim, "auth") as ch:
        st = Reflected(ch).call("svcos.auth.v1.AuthService", "GetStatus")
        assert st.password_set in (True, False)

    with channel(sim, "supervisor") as ch:
        listing = Reflected(ch).call("svcos.supervisor.v1.SupervisorService", "ListServices")
        names = {s.name for s in listing.services}
        assert {"hw-agent", "stratum-agent", "auth", "gateway"} <= names, names

    with channel(sim, "stratum-agent") as ch:
        pools = Reflected(ch).call("svcos.stratum.v1.StratumService", "GetPools")
        assert len(pools.pools) >= 1
        assert pools.pools[0].url.startswith("stratum+tcp://")

    with channel(sim, "hw-agent") as ch:
        telemetry = wait_for(
            lambda: Reflected(ch)
            .call("svcos.hwagent.v1.HwAgentService", "GetTelemetry")
            .telemetry,
            30,
            "hw-agent telemetry",
        )
        assert len(telemetry.chains) >= 1


def test_health_answers_by_the_name_of_every_service_a_socket_serves(sim):
    """What `grpc_health_probe -service=NAME` asks, with grpcio-health-checking's own stub."""
    for service, expected in EXPECTED.items():
        with channel(sim, service) as ch:
            health = health_pb2_grpc.HealthStub(ch)

            def check(name):
                return health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)

            wait_for(lambda: check("").status == health_pb2.HealthCheckResponse.SERVING, 30,
                     f"{service}.sock serving")
            for name in expected:
                assert check(name).status == health_pb2.HealthCheckResponse.SERVING, (service, name)
            # A name this socket does not serve: NOT_FOUND, as the health protocol says.
            others = set().union(*(v for k, v in EXPECTED.items() if k != service))
            for name in sorted(others)[:3] + ["svcos.nothing.v1.NoService"]:
                with pytest.raises(grpc.RpcError) as err:
                    check(name)
                assert err.value.code() == grpc.StatusCode.NOT_FOUND, (service, name)


def test_a_bad_request_gets_a_typed_status_not_a_protocol_error(sim):
    with channel(sim, "supervisor") as ch:
        with pytest.raises(grpc.RpcError) as err:
            Reflected(ch).call(
                "svcos.supervisor.v1.SupervisorService", "Restart", name="no-such-service"
            )
        assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


def test_reflection_v1_answers_too(sim):
    """grpcurl speaks v1 first; its messages are the v1alpha ones under another package."""
    with channel(sim, "auth") as ch:
        stream = ch.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        responses = list(
            stream(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        )
        names = {s.name for s in responses[0].list_services_response.service}
        assert {"svcos.auth.v1.AuthService", HEALTH} <= names, names
