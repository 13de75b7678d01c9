// vap_eval: decides admission requests with a ValidatingAdmissionPolicy as the API server's own
// code does (k8s.io/apiserver's policy/validating package, the version the lab's cluster runs),
// so the unit tests check what the policies rackform renders refuse and let through, not only
// their shape (tests/unit/vap_support.py builds and runs it).
//
// stdin: {"policy": <ValidatingAdmissionPolicy>, "requests": [<request>...]}, a request being
// {"operation", "resource": {group, version, resource}, "kind": {group, version, kind},
// "namespace", "name", "object", "oldObject", "user": {"name", "groups"}, "namespaceObject"}.
// stdout: one {"matched", "denied", "messages", "errors"} per request, in order; exit 3 (and
// each expression that does not compile on stderr) for a policy the API server would refuse.
//
// What this does not do: the policy's matchConstraints (resources, namespace and object
// selectors) and its binding are the API server's dispatcher's, not evaluated here; the unit
// tests check them by their shape. Matched requests go through matchConditions, variables,
// validations and messageExpressions exactly as compilePolicy in plugin.go wires them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

type groupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

type groupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

type request struct {
	Operation string                 `json:"operation"`
	Resource  groupVersionResource   `json:"resource"`
	Kind      groupVersionKind       `json:"kind"`
	Namespace string                 `json:"namespace"`
	Name      string                 `json:"name"`
	Object    map[string]interface{} `json:"object"`
	OldObject map[string]interface{} `json:"oldObject"`
	User      struct {
		Name   string   `json:"name"`
		Groups []string `json:"groups"`
	} `json:"user"`
	NamespaceObject *corev1.Namespace `json:"namespaceObject"`
}

type input struct {
	Policy   admissionregistrationv1.ValidatingAdmissionPolicy `json:"policy"`
	Requests []request                                         `json:"requests"`
}

type outcome struct {
	Matched  bool     `json:"matched"`
	Denied   bool     `json:"denied"`
	Messages []string `json:"messages"`
	Errors   []string `json:"errors"`
}

// compile is plugin.go's compilePolicy (unexported there), for a policy without params, and
// the compile errors of its expressions: the API server refuses such a policy when it is created
// (its validation compiles each one), while the validator would only skip a broken message.
func compile(policy *admissionregistrationv1.ValidatingAdmissionPolicy) (validating.Validator, []string, error) {
	optionalVars := cel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}
	expressionOptionalVars := cel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: false}
	envs := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	compiler, err := cel.NewCompositedCompiler(envs)
	if err != nil {
		return nil, nil, err
	}
	var compileErrors []string
	check := func(what string, accessor cel.ExpressionAccessor, options cel.OptionalVariableDeclarations) {
		// NewExpressions: what the API server compiles a policy it is given with (pkg/apis/admissionregistration/validation).
		if result := compiler.Compiler.CompileCELExpression(accessor, options, environment.NewExpressions); result.Error != nil {
			compileErrors = append(compileErrors, fmt.Sprintf("%s: %s", what, result.Error.Error()))
		}
	}
	for i, variable := range policy.Spec.Variables {
		result := compiler.CompileAndStoreVariable(&validating.Variable{Name: variable.Name, Expression: variable.Expression},
			optionalVars, environment.StoredExpressions)
		if result.Error != nil {
			compileErrors = append(compileErrors, fmt.Sprintf("variables[%d] %s: %s", i, variable.Name, result.Error.Error()))
		}
	}
	var matcher matchconditions.Matcher
	if len(policy.Spec.MatchConditions) > 0 {
		conditions := make([]cel.ExpressionAccessor, len(policy.Spec.MatchConditions))
		for i := range policy.Spec.MatchConditions {
			conditions[i] = (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i])
			check(fmt.Sprintf("matchConditions[%d]", i), conditions[i], optionalVars)
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions, optionalVars, environment.StoredExpressions),
			policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	validations := make([]cel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]cel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, validation := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: validation.Expression, Message: validation.Message,
			Reason: validation.Reason}
		check(fmt.Sprintf("validations[%d].expression", i), validations[i], optionalVars)
		if validation.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: validation.MessageExpression}
			check(fmt.Sprintf("validations[%d].messageExpression", i), messages[i], expressionOptionalVars)
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, expressionOptionalVars, environment.StoredExpressions),
		policy.Spec.FailurePolicy,
		nil,
	), compileErrors, nil
}

func object(fields map[string]interface{}) runtime.Object {
	if fields == nil {
		return nil
	}
	return &unstructured.Unstructured{Object: fields}
}

func decide(validator validating.Validator, r request) outcome {
	userInfo := &user.DefaultInfo{Name: r.User.Name, Groups: r.User.Groups}
	resource := schema.GroupVersionResource{Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource}
	kind := schema.GroupVersionKind{Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind}
	attributes := admission.NewAttributesRecord(object(r.Object), object(r.OldObject), kind, r.Namespace, r.Name,
		resource, "", admission.Operation(r.Operation), nil, false, userInfo)
	versioned := &admission.VersionedAttributes{Attributes: attributes, VersionedKind: kind,
		VersionedObject: object(r.Object), VersionedOldObject: object(r.OldObject)}
	result := validator.Validate(context.Background(), resource, versioned, nil, r.NamespaceObject,
		celconfig.RuntimeCELCostBudget, nil)
	found := outcome{Matched: true, Messages: []string{}, Errors: []string{}}
	if len(result.Decisions) == 0 {
		found.Matched = false
	}
	for _, decision := range result.Decisions {
		switch decision.Evaluation {
		case validating.EvalError:
			found.Errors = append(found.Errors, decision.Message)
			found.Denied = found.Denied || decision.Action == validating.ActionDeny
		case validating.EvalDeny:
			found.Denied = true
			found.Messages = append(found.Messages, decision.Message)
		}
	}
	return found
}

func main() {
	var given input
	if err := json.NewDecoder(os.Stdin).Decode(&given); err != nil {
		fmt.Fprintln(os.Stderr, "vap_eval: bad input:", err)
		os.Exit(2)
	}
	validator, compileErrors, err := compile(&given.Policy)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vap_eval:", err)
		os.Exit(2)
	}
	if len(compileErrors) > 0 {
		for _, message := range compileErrors {
			fmt.Fprintln(os.Stderr, "vap_eval: does not compile:", message)
		}
		os.Exit(3)
	}
	outcomes := make([]outcome, len(given.Requests))
	for i, r := range given.Requests {
		outcomes[i] = decide(validator, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(outcomes); err != nil {
		fmt.Fprintln(os.Stderr, "vap_eval:", err)
		os.Exit(2)
	}
}
