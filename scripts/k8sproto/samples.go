package main

import (
	"bytes"
	"encoding/json"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

// encode returns obj in client-go's protobuf wire form and in Go's JSON form.
func encode(scheme *runtime.Scheme, obj runtime.Object) ([]byte, []byte) {
	gvks, _, err := scheme.ObjectKinds(obj)
	must(err)
	gvk := gvks[0]
	for _, k := range gvks {
		if k.Group == "meta.k8s.io" { // DeleteOptions is known in every group version
			gvk = k
		}
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var pb bytes.Buffer
	must(protobuf.NewSerializer(scheme, scheme).Encode(obj, &pb))
	js, err := json.MarshalIndent(obj, "", "  ")
	must(err)
	return pb.Bytes(), append(js, '\n')
}

func meta(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Namespace:   namespace,
		Labels:      map[string]string{"app": name, "kai.scheduler/queue": "q1"},
		Annotations: map[string]string{"note": "protobuf fixture"},
	}
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		SchedulerName:                 "kai-scheduler",
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr(int64(0)),
		PriorityClassName:             "train",
		NodeSelector:                  map[string]string{"gpu": "a100"},
		Tolerations: []corev1.Toleration{{
			Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
			TolerationSeconds: ptr(int64(-5)),
		}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"},
				}}}},
			},
		}},
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), SupplementalGroups: []int64{5, 6}},
		Containers: []corev1.Container{{
			Name:    "main",
			Image:   "busybox:1.36",
			Command: []string{"sh", "-c", "sleep 3600"},
			Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
			}}},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
			},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
				InitialDelaySeconds: 3,
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr(int32(0o644)),
			}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("1Gi"))}}},
		},
	}
}

func samples() map[string]runtime.Object {
	stamp := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	micro := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC))
	podMeta := meta("pb-pod", "default")
	podMeta.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "1234", Controller: ptr(true),
	}}
	podMeta.Finalizers = []string{"example.com/keep"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}}, Spec: podSpec()}
	template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}}
	return map[string]runtime.Object{
		"pod":       &corev1.Pod{ObjectMeta: podMeta, Spec: podSpec()},
		"namespace": &corev1.Namespace{ObjectMeta: meta("pb-ns", "")},
		"configmap": &corev1.ConfigMap{
			ObjectMeta: meta("pb-cm", "default"),
			Data:       map[string]string{"a": "1", "empty": ""},
			BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
		},
		"secret": &corev1.Secret{ObjectMeta: meta("pb-secret", "default"), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}},
		"pvc": &corev1.PersistentVolumeClaim{
			ObjectMeta: meta("pb-pvc", "default"),
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr("standard"),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{"storage": resource.MustParse("5Gi")}},
			},
		},
		"job": &batchv1.Job{
			ObjectMeta: meta("pb-job", "default"),
			Spec: batchv1.JobSpec{
				Parallelism: ptr(int32(2)), Completions: ptr(int32(0)), BackoffLimit: ptr(int32(0)),
				ActiveDeadlineSeconds: ptr(int64(600)), Suspend: ptr(false),
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "j"}}, Spec: podSpec()},
			},
		},
		"cronjob": &batchv1.CronJob{
			ObjectMeta: meta("pb-cronjob", "default"),
			Spec: batchv1.CronJobSpec{
				Schedule: "* * * * *", TimeZone: ptr("UTC"), StartingDeadlineSeconds: ptr(int64(0)),
				ConcurrencyPolicy: batchv1.ForbidConcurrent, Suspend: ptr(false),
				SuccessfulJobsHistoryLimit: ptr(int32(0)), FailedJobsHistoryLimit: ptr(int32(2)),
				JobTemplate: batchv1.JobTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"run": "nightly"}},
					Spec: batchv1.JobSpec{
						BackoffLimit: ptr(int32(0)),
						Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cj"}}, Spec: podSpec()},
					},
				},
			},
		},
		"deployment": &appsv1.Deployment{
			ObjectMeta: meta("pb-deploy", "default"),
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(0)), Selector: selector, Template: template,
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr(intstr.FromString("25%")), MaxSurge: ptr(intstr.FromInt32(1)),
				}},
			},
		},
		"statefulset": &appsv1.StatefulSet{
			ObjectMeta: meta("pb-sts", "default"),
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr(int32(2)), Selector: selector, Template: template, ServiceName: "w",
				PodManagementPolicy: appsv1.ParallelPodManagement,
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
					ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{"storage": resource.MustParse("1Gi")}},
					},
				}},
			},
		},
		"priorityclass": &schedulingv1.PriorityClass{
			ObjectMeta: meta("pb-pc", ""), Value: -100, Description: "fixture", PreemptionPolicy: ptr(corev1.PreemptNever),
		},
		"lease": &coordinationv1.Lease{
			ObjectMeta: meta("pb-lease", "default"),
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr("me"), LeaseDurationSeconds: ptr(int32(15)), AcquireTime: &micro, RenewTime: &micro,
				LeaseTransitions: ptr(int32(0)),
			},
		},
		"event": &corev1.Event{
			ObjectMeta:     meta("pb-event", "default"),
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p", APIVersion: "v1"},
			Reason:         "Tested", Message: "hello", Type: "Normal", Count: 1,
			FirstTimestamp: stamp, LastTimestamp: stamp, EventTime: micro,
			Source:              corev1.EventSource{Component: "fixture"},
			ReportingController: "kai-py/fixture", ReportingInstance: "x", Action: "Test",
		},
		"runtimeclass": &nodev1.RuntimeClass{
			ObjectMeta: meta("pb-rc", ""), Handler: "runc",
			Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{"cpu": resource.MustParse("250m"), "memory": resource.MustParse("64Mi")}},
			Scheduling: &nodev1.Scheduling{
				NodeSelector: map[string]string{"runtime": "kata"},
				Tolerations:  []corev1.Toleration{{Key: "kata", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule}},
			},
		},
		"storageclass": &storagev1.StorageClass{
			ObjectMeta: meta("pb-sc", ""), Provisioner: "example.com/csi", Parameters: map[string]string{"type": "ssd"},
			ReclaimPolicy: ptr(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr(storagev1.VolumeBindingWaitForFirstConsumer),
			AllowVolumeExpansion: ptr(true),
		},
		"persistentvolume": &corev1.PersistentVolume{
			ObjectMeta: meta("pb-pv", ""),
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{"storage": resource.MustParse("10Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/pv"}},
				StorageClassName:       "standard",
			},
		},
		"controllerrevision": &appsv1.ControllerRevision{
			ObjectMeta: meta("pb-rev", "default"),
			Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"metadata":{"labels":{"app":"w"}}}}}`)},
			Revision:   3,
		},
		"binding": &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "pb-pod", Namespace: "default", UID: "1234"},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "gpu-node-1"},
		},
		"eviction": &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: "pb-pod", Namespace: "default"},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))},
		},
		"eventsv1": &eventsv1.Event{
			ObjectMeta: meta("pb-ev1", "default"), EventTime: micro,
			ReportingController: "kai-py/fixture", ReportingInstance: "x", Action: "Bind", Reason: "Scheduled",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"},
			Note:      "bound", Type: "Normal",
			Series: &eventsv1.EventSeries{Count: 2, LastObservedTime: micro},
		},
		"deleteoptions": &metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0)), PropagationPolicy: ptr(metav1.DeletePropagationForeground)},
	}
}
