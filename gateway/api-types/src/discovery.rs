//! Discovery: `/api/index`, the compatibility manifests, versions, capabilities, update
//! metadata, network info, board presets and the static claims contract.

use std::collections::BTreeMap;

use serde::Serialize;
use svcos_proto::supervisor::v1 as pb;

/// One declared route of the compatibility surface.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeclaredRoute {
    /// HTTP method.
    pub method: &'static str,
    /// Path as mounted (`:name` for a parameter).
    pub path: &'static str,
    /// The surface it belongs to.
    pub surface: &'static str,
    /// full, partial or planned.
    pub support: &'static str,
    /// Whether it changes state (every method but GET).
    pub mutates: bool,
    /// open, bearer or metrics.
    pub auth: &'static str,
}

/// One surface of the declared compatibility surface.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Surface {
    /// Surface id (`svc-rest`, `websocket`, ...).
    pub id: &'static str,
    /// What it is.
    pub description: &'static str,
    /// How many declared routes it has.
    pub declared_routes: usize,
}

/// `GET /api/index` (`svcos.api.index.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IndexBody {
    /// `svcos.api.index.v1`.
    pub schema: &'static str,
    /// The API contract version.
    pub api_contract_version: &'static str,
    /// Number of declared routes.
    pub route_count: usize,
    /// Number of surfaces.
    pub surface_count: usize,
    /// The surfaces.
    pub surfaces: Vec<Surface>,
    /// The declared routes.
    pub routes: Vec<DeclaredRoute>,
    /// Every operation the gateway mounts.
    pub mounted_operations: usize,
}

/// The error envelope as the manifest describes it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvelopeDescription {
    /// The envelope's members.
    pub members: [&'static str; 4],
    /// Every `code` value.
    pub codes: Vec<&'static str>,
}

/// `GET /api/compatibility/manifest` and `/api/system/api-compatibility/manifest`
/// (`svcos.api.compatibility_manifest.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ManifestBody {
    /// `svcos.api.compatibility_manifest.v1`.
    pub schema: &'static str,
    /// The API contract version.
    pub api_contract_version: &'static str,
    /// The surfaces.
    pub surfaces: Vec<Surface>,
    /// The declared routes.
    pub declared_routes: Vec<DeclaredRoute>,
    /// Every operation the gateway mounts.
    pub mounted_operations: usize,
    /// Mounted operations per support grade.
    pub mounted_by_support: BTreeMap<&'static str, usize>,
    /// The error envelope.
    pub error_envelope: EnvelopeDescription,
}

/// `GET /api/dashboard/version` (`svcos.api.version.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VersionBody {
    /// `svcos.api.version.v1`.
    pub schema: &'static str,
    /// Always `svcOS`.
    pub firmware: &'static str,
    /// Firmware version: the running slot's, as the updater reports it (the same figure as
    /// the update status's `running_version`), or this build's when the slot manager is out
    /// of reach.
    pub version: String,
    /// The API contract version.
    pub api_contract_version: &'static str,
    /// debug or release.
    pub build_profile: &'static str,
}

/// `up` or `down`.
pub fn up_word(up: bool) -> &'static str {
    if up { "up" } else { "down" }
}

/// `GET /api/dashboard/health` (`svcos.api.dashboard.health.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DashboardHealthBody {
    /// `svcos.api.dashboard.health.v1`.
    pub schema: &'static str,
    /// Always `up` (it answers).
    pub gateway: &'static str,
    /// up or down: the telemetry stream.
    pub hw_agent: &'static str,
    /// up or down: the pool stream.
    pub stratum_agent: &'static str,
    /// up or down: auth's revocation stream.
    pub auth_revocation_stream: &'static str,
    /// A snapshot is missing.
    pub degraded: bool,
}

impl DashboardHealthBody {
    /// From which streams are live.
    pub fn new(hw_agent: bool, stratum_agent: bool, revocations: bool) -> Self {
        DashboardHealthBody {
            schema: "svcos.api.dashboard.health.v1",
            gateway: "up",
            hw_agent: up_word(hw_agent),
            stratum_agent: up_word(stratum_agent),
            auth_revocation_stream: up_word(revocations),
            degraded: !(hw_agent && stratum_agent),
        }
    }
}

/// `GET /api/system/update/metadata` (`svcos.api.update.metadata.v1`), an open route.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UpdateMetadataBody {
    /// `svcos.api.update.metadata.v1`.
    pub schema: &'static str,
    /// Always `svcOS`.
    pub firmware: &'static str,
    /// The running version (the build's own while the supervisor is unreachable).
    pub current_version: String,
    /// The API contract version.
    pub api_contract_version: &'static str,
    /// Where updates come from.
    pub update_source: &'static str,
    /// The slot manager is reachable.
    pub update_supported: bool,
    /// The bundle format.
    pub bundle_format: &'static str,
    /// Largest bundle accepted, bytes.
    pub max_bundle_bytes: u64,
    /// Where a bundle is uploaded.
    pub upload_paths: Vec<&'static str>,
    /// Where the update's progress is read.
    pub status_path: &'static str,
}

/// One slot as `/api/v1/capabilities` lists it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CapabilitySlot {
    /// RAUC slot name.
    pub name: String,
    /// Bootloader name.
    pub bootname: String,
    /// booted, inactive or active.
    pub state: String,
    /// good, bad or empty when unknown.
    pub boot_status: String,
    /// Installed version.
    pub version: String,
}

/// The update paths `/api/v1/capabilities` names.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UpdatePaths {
    /// Where a bundle is uploaded.
    pub upload: Vec<&'static str>,
    /// The update status.
    pub status: &'static str,
    /// Restore to stock.
    pub restore_to_stock: &'static str,
    /// Its preflight checks.
    pub restore_preflight: &'static str,
}

/// The update part of `/api/v1/capabilities`; `null` while the supervisor is unreachable.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CapabilityUpdate {
    /// The slot manager is reachable.
    pub slot_manager_reachable: bool,
    /// The slot running now.
    pub booted_slot: String,
    /// The slot the bootloader tries first.
    pub primary_slot: String,
    /// The RAUC compatible string.
    pub compatible: String,
    /// Every slot.
    pub slots: Vec<CapabilitySlot>,
    /// The update paths.
    pub paths: UpdatePaths,
    /// How a bad update is rolled back.
    pub rollback: &'static str,
}

impl CapabilityUpdate {
    /// From the supervisor's update status and the upload paths.
    pub fn new(u: &pb::UpdateStatus, upload: Vec<&'static str>) -> Self {
        CapabilityUpdate {
            slot_manager_reachable: u.slot_manager_reachable,
            booted_slot: u.booted_slot.clone(),
            primary_slot: u.primary_slot.clone(),
            compatible: u.compatible.clone(),
            slots: u
                .slots
                .iter()
                .map(|s| CapabilitySlot {
                    name: s.name.clone(),
                    bootname: s.bootname.clone(),
                    state: s.state.clone(),
                    boot_status: s.boot_status.clone(),
                    version: s.version.clone(),
                })
                .collect(),
            paths: UpdatePaths {
                upload,
                status: "/api/v1/firmware/update/status",
                restore_to_stock: "/api/system/restore-to-stock",
                restore_preflight: "/api/system/restore-to-stock/preflight-checks",
            },
            rollback: "automatic: a new slot that is not healthy in time, or crash-loops, is marked bad and the previous slot boots",
        }
    }
}

/// What this build can do.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Capabilities {
    /// `POST /api/v1/firmware/update` is implemented.
    pub firmware_update: bool,
    /// `POST /api/v1/system/upgrade` is implemented.
    pub system_upgrade: bool,
    /// Always true.
    pub stratum_v1: bool,
    /// `[stratum].sv2_enabled`.
    pub stratum_v2: bool,
    /// Always true.
    pub websocket: bool,
    /// `[api].websocket_tickets`.
    pub websocket_tickets: bool,
    /// Always true.
    pub metrics: bool,
    /// `[api].metrics_require_auth`.
    pub metrics_require_auth: bool,
    /// `[legacy].enabled`.
    pub legacy_tcp_api: bool,
    /// The operating modes.
    pub modes: [&'static str; 3],
    /// `POST /mcp` is implemented.
    pub mcp: bool,
}

/// `GET /api/v1/capabilities` (`svcos.api.v1.capabilities.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CapabilitiesBody {
    /// `svcos.api.v1.capabilities.v1`.
    pub schema: &'static str,
    /// Always `svcOS`.
    pub firmware: &'static str,
    /// The build's version.
    pub version: &'static str,
    /// The API contract version.
    pub api_contract_version: &'static str,
    /// The slot's running version; `null` while the supervisor is unreachable.
    pub running_version: Option<String>,
    /// Update state and paths; `null` while the supervisor is unreachable.
    pub update: Option<CapabilityUpdate>,
    /// What this build can do.
    pub capabilities: Capabilities,
}

/// `GET /api/system/update_capability` (`svcos.api.update_capability.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UpdateCapabilityBody {
    /// `svcos.api.update_capability.v1`.
    pub schema: &'static str,
    /// Some update method is implemented.
    pub supported: bool,
    /// `local upload`, `v1 alias`.
    pub methods: Vec<&'static str>,
    /// Always false: the firmware never contacts an update server.
    pub remote_update_server: bool,
    /// Why not supported (empty when supported).
    pub reason: &'static str,
}

impl UpdateCapabilityBody {
    /// From the implemented update methods.
    pub fn new(methods: Vec<&'static str>) -> Self {
        UpdateCapabilityBody {
            schema: "svcos.api.update_capability.v1",
            supported: !methods.is_empty(),
            reason: if methods.is_empty() {
                "firmware update is not part of this build"
            } else {
                ""
            },
            methods,
            remote_update_server: false,
        }
    }
}

/// One endpoint this unit serves.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Endpoint {
    /// rest, websocket, dashboard, legacy-miner-tcp.
    pub name: &'static str,
    /// Bind address.
    pub bind: String,
    /// TCP port.
    pub port: u16,
    /// The path (websocket only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'static str>,
    /// Whether it is on (legacy-miner-tcp only; the others always are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `GET /api/network/info` (`svcos.api.network.info.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NetworkInfoBody {
    /// `svcos.api.network.info.v1`.
    pub schema: &'static str,
    /// Configured hostname.
    pub hostname: String,
    /// `<hostname>.local`.
    pub mdns_name: String,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    /// What the mDNS/DNS-SD responder announces (`[network.mdns]`).
    pub mdns: MdnsStatus,
    /// The LAN interface (the one of the IPv4 default route, else the first with an IPv4
    /// address); `null` when the unit has no interface but loopback.
    pub primary: Option<LanInterface>,
    /// Every interface but loopback, by name.
    pub interfaces: Vec<LanInterface>,
    /// The IPv4 default gateway in use; `null` without a default route or one without a gateway.
    pub gateway: Option<String>,
    /// The name servers the resolver asks, in order.
    pub dns: Vec<String>,
    /// How the LAN settings are configured (`[network.ipv4].method`: dhcp or static); what is in
    /// force is `interfaces`.
    pub method: &'static str,
    /// Where the addresses come from on this unit.
    pub note: &'static str,
}

impl NetworkInfoBody {
    /// The body for `c` and the responder's `mdns` state, with the interfaces, default route
    /// and name servers as the kernel and the resolver report them now.
    pub fn now(c: &svcos_common::config::Config, mdns: MdnsStatus) -> Self {
        use svcos_common::net;
        let endpoint = |name, bind: std::net::IpAddr, port| Endpoint {
            name,
            bind: bind.to_string(),
            port,
            path: None,
            enabled: None,
        };
        let interfaces = net::interfaces();
        let (routed, gateway) = net::default_route().unzip();
        NetworkInfoBody {
            schema: "svcos.api.network.info.v1",
            hostname: c.system.hostname.clone(),
            mdns_name: format!("{}.local", c.system.hostname),
            endpoints: vec![
                endpoint("rest", c.api.bind, c.api.port),
                Endpoint {
                    path: Some("/ws"),
                    ..endpoint("websocket", c.api.bind, c.api.port)
                },
                endpoint("dashboard", c.api.bind, c.api.http_port),
                Endpoint {
                    enabled: Some(c.legacy.enabled),
                    ..endpoint("legacy-miner-tcp", c.legacy.bind, c.legacy.port)
                },
            ],
            mdns,
            primary: net::primary_interface(&interfaces, routed.as_deref()).map(LanInterface::from),
            interfaces: interfaces.iter().map(LanInterface::from).collect(),
            gateway: gateway.flatten().map(|g| g.to_string()),
            dns: net::dns_servers().iter().map(ToString::to_string).collect(),
            method: c.network.ipv4.method.as_str(),
            note: "addresses, routes and name servers as the kernel and the resolver report \
                   them now; the simulator reports the host it runs on",
        }
    }
}

impl NetworkConfigBody {
    /// The body of the settings in `c` (at `generation`) and the file they go to.
    pub fn new(
        c: &svcos_common::config::Config,
        networkd_file: &std::path::Path,
        file_written: Option<bool>,
        generation: u64,
    ) -> Self {
        let v4 = &c.network.ipv4;
        NetworkConfigBody {
            schema: "svcos.api.network.config.v1",
            hostname: c.system.hostname.clone(),
            method: v4.method.as_str(),
            interface: v4.interface.clone(),
            address: v4.address.clone(),
            gateway: v4.gateway.clone(),
            dns: v4.dns.clone(),
            networkd_file: networkd_file.display().to_string(),
            file_written,
            generation,
            note: "the image's svcos-network.path installs the file for systemd-networkd and \
                   reloads it; the simulator only writes it (its host's network is not the \
                   miner's)",
        }
    }
}

/// One interface of `GET /api/network/info`, as the kernel reports it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LanInterface {
    /// Kernel name (`eth0`).
    pub name: String,
    /// MAC address, lower case `aa:bb:cc:dd:ee:ff`; `null` for an interface without one.
    pub mac: Option<String>,
    /// Up and with carrier.
    pub up: bool,
    /// IPv4 addresses with prefix length (`192.168.1.50/24`).
    pub ipv4: Vec<String>,
    /// IPv6 addresses with prefix length.
    pub ipv6: Vec<String>,
}

impl From<&svcos_common::net::Interface> for LanInterface {
    fn from(i: &svcos_common::net::Interface) -> Self {
        LanInterface {
            name: i.name.clone(),
            mac: i.mac.clone(),
            up: i.up,
            ipv4: i.ipv4.iter().map(ToString::to_string).collect(),
            ipv6: i.ipv6.iter().map(ToString::to_string).collect(),
        }
    }
}

/// `GET|PUT /api/network/config` (`svcos.api.network.config.v1`): the LAN settings as
/// configured (`[network.ipv4]`, `[system].hostname`) and the networkd file they are written to.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NetworkConfigBody {
    /// `svcos.api.network.config.v1`.
    pub schema: &'static str,
    /// `[system].hostname` (sent to the DHCP server; `<hostname>.local` over mDNS).
    pub hostname: String,
    /// dhcp or static.
    pub method: &'static str,
    /// The LAN interface the settings apply to.
    pub interface: String,
    /// Static only: address with prefix length; empty with DHCP.
    pub address: String,
    /// Static only: the default gateway; empty with DHCP.
    pub gateway: String,
    /// DNS servers (with DHCP: empty = the DHCP server's).
    pub dns: Vec<String>,
    /// The systemd-networkd file the settings are written to.
    pub networkd_file: String,
    /// Whether this request rewrote the file (PUT only; `null` on GET).
    pub file_written: Option<bool>,
    /// The config generation in force.
    pub generation: u64,
    /// What applies the file on this unit.
    pub note: &'static str,
}

/// The mDNS/DNS-SD responder's state, as `GET /api/network/info` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MdnsStatus {
    /// `[network.mdns].enabled`.
    pub enabled: bool,
    /// Whether the responder runs and has registered its records.
    pub running: bool,
    /// The host name it answers A/AAAA queries for (`<hostname>.local.`), while running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `[network.mdns].interfaces` in force; empty = every interface with an address.
    pub interfaces: Vec<String>,
    /// The service instances announced.
    pub services: Vec<MdnsService>,
    /// The responder's last error or name conflict, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One announced DNS-SD service instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MdnsService {
    /// Service type, e.g. `_http._tcp.local.`.
    pub service_type: String,
    /// Instance name, e.g. `svcos._http._tcp.local.`.
    pub instance: String,
    /// TCP port in the SRV record.
    pub port: u16,
    /// TXT record, `key=value` in the order sent.
    pub txt: Vec<String>,
}

/// One board preset.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Preset {
    /// s9, s19, bitaxe.
    pub id: &'static str,
    /// Miner model.
    pub model: &'static str,
    /// Hash chains.
    pub chains: u32,
    /// Chips per chain.
    pub chips_per_chain: u32,
    /// ASIC model.
    pub chip_model: &'static str,
    /// Default chip frequency, MHz.
    pub default_frequency_mhz: f64,
    /// The configured board.
    pub active: bool,
}

/// `GET /api/profiles/presets` (`svcos.api.profiles.presets.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PresetsBody {
    /// `svcos.api.profiles.presets.v1`.
    pub schema: &'static str,
    /// The presets.
    pub presets: Vec<Preset>,
}

/// The donation defaults of the claims contract.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DonationClaims {
    /// Off by default.
    pub default_enabled: bool,
    /// 0 by default.
    pub default_percent: f64,
    /// It can be turned off.
    pub disable_supported: bool,
    /// The donation pool is listed with the others.
    pub pool_visible: bool,
    /// not_run.
    pub donation_off_test_status: &'static str,
    /// not_read_by_static_contract.
    pub current_state_source: &'static str,
}

/// One write surface's audit status.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WriteSurface {
    /// Surface id.
    pub surface: &'static str,
    /// partial, ...
    pub audit_status: &'static str,
}

/// `GET /api/competitive/readiness` (`svcos.api.competitive_readiness.v1`): the spec's static
/// claims contract, member for member.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReadinessBody {
    /// `svcos.api.competitive_readiness.v1`.
    pub schema: &'static str,
    /// `static`.
    pub contract: &'static str,
    /// What it reports.
    pub reports: &'static str,
    /// No license.
    pub license_required: bool,
    /// No license server.
    pub license_server_required: bool,
    /// No activation.
    pub activation_required: bool,
    /// No mandatory fee.
    pub mandatory_fee: bool,
    /// `transparent_donation`.
    pub fee_route: &'static str,
    /// The donation defaults.
    pub donation: DonationClaims,
    /// Not claimed yet.
    pub home_miner_safe: bool,
    /// partial.
    pub home_miner_safe_status: &'static str,
    /// Per write surface.
    pub write_surfaces: Vec<WriteSurface>,
    /// `local_first`.
    pub offline_behavior: &'static str,
}

impl ReadinessBody {
    /// The static contract.
    pub fn contract() -> Self {
        let partial = |surface| WriteSurface {
            surface,
            audit_status: "partial",
        };
        ReadinessBody {
            schema: "svcos.api.competitive_readiness.v1",
            contract: "static",
            reports: "defaults of this firmware, not the live state of this unit",
            license_required: false,
            license_server_required: false,
            activation_required: false,
            mandatory_fee: false,
            fee_route: "transparent_donation",
            donation: DonationClaims {
                default_enabled: false,
                default_percent: 0.0,
                disable_supported: true,
                pool_visible: true,
                donation_off_test_status: "not_run",
                current_state_source: "not_read_by_static_contract",
            },
            home_miner_safe: false,
            home_miner_safe_status: "partial",
            write_surfaces: [
                "svc-rest",
                "third-party-compat-rest",
                "v1-firmware-aliases",
                "legacy-miner-tcp",
            ]
            .into_iter()
            .map(partial)
            .collect(),
            offline_behavior: "local_first",
        }
    }
}

/// `GET /api/network/block` (`svcos.api.network.block.v1`): block data read from the current
/// pool job.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NetworkBlockBody {
    /// Where the data comes from.
    pub source: &'static str,
    /// `svcos.api.network.block.v1`.
    pub schema: &'static str,
    /// The BIP34 height in the coinbase; `null` when the coinbase does not carry one.
    pub height: Option<u64>,
    /// The previous block's hash, display order.
    pub previous_block_hash: String,
    /// nBits, 8 hex digits.
    pub nbits: String,
    /// The difficulty nBits encodes; `null` for an invalid nBits.
    pub network_difficulty: Option<f64>,
    /// Block version, 8 hex digits.
    pub version: String,
    /// The job's nTime.
    pub ntime: u32,
    /// The pool's job id.
    pub job_id: String,
    /// The pool the job came from.
    pub pool_index: u32,
    /// Its URL; `null` while stratum-agent's snapshot is missing.
    pub pool_url: Option<String>,
    /// The pool's share difficulty.
    pub share_difficulty: f64,
    /// The job belongs to donation time.
    pub donation_job: bool,
    /// When stratum-agent received it, Unix ms.
    pub received_at_ms: i64,
}

/// What the firmware connects to, in words.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Outbound {
    /// Pool connections.
    pub pools: &'static str,
    /// Energy source polling.
    pub energy_sources: &'static str,
    /// Fleet discovery.
    pub fleet_discovery: &'static str,
}

/// `GET /api/network/config_schema` (`svcos.api.network.config_schema.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfigSchemaBody {
    /// `svcos.api.network.config_schema.v1`.
    pub schema: &'static str,
    /// The whole config file's JSON Schema (docs/config.schema.json, derived from the config
    /// types); network members: system.hostname, api, legacy, energy.*.source_url.
    pub json_schema: serde_json::Value,
    /// What the firmware connects to.
    pub outbound: Outbound,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_degraded_when_a_stream_is_missing() {
        for (hw, stratum, degraded) in [
            (true, true, false),
            (false, true, true),
            (true, false, true),
        ] {
            let h = DashboardHealthBody::new(hw, stratum, false);
            assert_eq!(h.degraded, degraded, "{hw} {stratum}");
            assert_eq!(h.auth_revocation_stream, "down");
        }
    }

    #[test]
    fn update_capability_says_why_not() {
        let none = UpdateCapabilityBody::new(vec![]);
        assert!(!none.supported && !none.reason.is_empty());
        let some = UpdateCapabilityBody::new(vec!["local upload"]);
        assert!(some.supported && some.reason.is_empty());
    }

    #[test]
    fn endpoints_omit_what_does_not_apply() {
        let e = Endpoint {
            name: "rest",
            bind: "0.0.0.0".into(),
            port: 8080,
            path: None,
            enabled: None,
        };
        let v = serde_json::to_value(e).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
    }
}

/// One stored SSH key, as `GET /api/network/ssh` lists it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SshKey {
    /// Key type, e.g. `ssh-ed25519`.
    pub key_type: &'static str,
    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The comment after the key, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The line as stored.
    pub line: String,
}

/// `GET|PUT /api/network/ssh` (`svcos.api.network.ssh.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SshBody {
    /// `svcos.api.network.ssh.v1`.
    pub schema: &'static str,
    /// The SSH server's TCP port on the image (dropbear).
    pub port: u16,
    /// `[network.ssh].password_login`: false = keys only.
    pub password_login: bool,
    /// Where the keys are stored (0600, dropbear's `authorized_keys` format).
    pub authorized_keys_path: String,
    /// The stored keys, in file order.
    pub keys: Vec<SshKey>,
    /// What reads the file on this unit.
    pub note: &'static str,
}
