//! Pod volumes and PersistentVolumeClaims. The in-tree cloud and network volume plugins (deprecated or removed upstream,
//! and never used by runner pods) are refused with a clear error rather than converted.

use k8s_pb::api::core::v1 as core;

use super::json::{dropped, json_struct, unsupported};

json_struct! {
    core::Volume { name, volume_source as "" }
    core::VolumeSource {
        host_path, empty_dir,
        gce_persistent_disk with unsupported("volumes[].gcePersistentDisk"),
        aws_elastic_block_store with unsupported("volumes[].awsElasticBlockStore"),
        git_repo with unsupported("volumes[].gitRepo"),
        secret,
        nfs with unsupported("volumes[].nfs"),
        iscsi with unsupported("volumes[].iscsi"),
        glusterfs with unsupported("volumes[].glusterfs"),
        persistent_volume_claim,
        rbd with unsupported("volumes[].rbd"),
        flex_volume with unsupported("volumes[].flexVolume"),
        cinder with unsupported("volumes[].cinder"),
        cephfs with unsupported("volumes[].cephfs"),
        flocker with unsupported("volumes[].flocker"),
        downward_api as "downwardAPI",
        fc with unsupported("volumes[].fc"),
        azure_file with unsupported("volumes[].azureFile"),
        config_map,
        vsphere_volume with unsupported("volumes[].vsphereVolume"),
        quobyte with unsupported("volumes[].quobyte"),
        azure_disk with unsupported("volumes[].azureDisk"),
        photon_persistent_disk with unsupported("volumes[].photonPersistentDisk"),
        projected,
        portworx_volume with unsupported("volumes[].portworxVolume"),
        scale_io with unsupported("volumes[].scaleIO"),
        storageos with unsupported("volumes[].storageos"),
        csi,
        ephemeral with unsupported("volumes[].ephemeral"),
        image,
    }
    core::HostPathVolumeSource { path, r#type }
    core::EmptyDirVolumeSource { medium, size_limit }
    core::SecretVolumeSource { secret_name, items, default_mode, optional }
    core::PersistentVolumeClaimVolumeSource { claim_name, read_only }
    core::DownwardAPIVolumeSource { items, default_mode }
    core::DownwardAPIVolumeFile { path, field_ref, resource_field_ref, mode }
    core::ConfigMapVolumeSource { local_object_reference as "", items, default_mode, optional }
    core::KeyToPath { key, path, mode }
    core::ProjectedVolumeSource { sources, default_mode }
    core::VolumeProjection {
        secret, downward_api as "downwardAPI", config_map, service_account_token,
        cluster_trust_bundle, pod_certificate,
    }
    core::SecretProjection { local_object_reference as "", items, optional }
    core::ConfigMapProjection { local_object_reference as "", items, optional }
    core::DownwardAPIProjection { items }
    core::ServiceAccountTokenProjection { audience, expiration_seconds, path }
    core::ClusterTrustBundleProjection { name, signer_name, label_selector, optional, path }
    core::PodCertificateProjection {
        signer_name, key_type, max_expiration_seconds, credential_bundle_path, key_path,
        certificate_chain_path, user_annotations,
    }
    core::CSIVolumeSource { driver, read_only, fs_type, volume_attributes, node_publish_secret_ref }
    core::ImageVolumeSource { reference, pull_policy }
    core::PersistentVolumeClaim { metadata, spec, status with dropped }
    core::PersistentVolumeClaimSpec {
        access_modes, selector, resources, volume_name, storage_class_name, volume_mode,
        data_source, data_source_ref, volume_attributes_class_name,
    }
    core::VolumeResourceRequirements { limits, requests }
    core::TypedLocalObjectReference { api_group, kind, name }
    core::TypedObjectReference { api_group, kind, name, namespace }
}
