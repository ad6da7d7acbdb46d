package main

import (
	"runtime/debug"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Every GA group version of k8s.io/api.
var addToScheme = []func(*runtime.Scheme) error{
	admissionv1.AddToScheme,
	admissionregistrationv1.AddToScheme,
	appsv1.AddToScheme,
	authenticationv1.AddToScheme,
	authorizationv1.AddToScheme,
	autoscalingv1.AddToScheme,
	autoscalingv2.AddToScheme,
	batchv1.AddToScheme,
	certificatesv1.AddToScheme,
	coordinationv1.AddToScheme,
	corev1.AddToScheme,
	discoveryv1.AddToScheme,
	eventsv1.AddToScheme,
	flowcontrolv1.AddToScheme,
	networkingv1.AddToScheme,
	nodev1.AddToScheme,
	policyv1.AddToScheme,
	rbacv1.AddToScheme,
	resourcev1.AddToScheme,
	schedulingv1.AddToScheme,
	storagev1.AddToScheme,
	storagemigrationv1.AddToScheme,
}

func apiVersion() string {
	info, ok := debug.ReadBuildInfo()
	if ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/api" {
				return dep.Path + " " + dep.Version
			}
		}
	}
	return "unknown"
}
